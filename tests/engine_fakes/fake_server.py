"""A fake OpenAI-compatible serving engine for the engine tests (standard library only).

It behaves like a real server where the harness looks: ``/health``, ``/metrics`` (Prometheus text), ``/props``
(its effective configuration), streaming ``/v1/completions`` with ``usage`` and ``[DONE]``. Its speed is set by
``--slots`` (requests generated at once; the others wait) and ``--token-delay``; its answers are a deterministic
function of the prompt. Switches make it misbehave the ways the harness must catch: ``--lossy`` (other answers),
``--fail-every K`` (HTTP 500), ``--short`` (answers cut short), ``--spec-type`` with ``--spec-drafts 0``
(speculation that never drafts), ``--ignore-flag`` (accepts a flag and ignores it), ``--escape PIDFILE`` (leaves
a double-forked, setsid grandchild behind), ``--children N`` (workers in its process group, like vLLM's engine
core), ``--ignore-sigterm``, ``--exit-at-start``, ``--startup-delay``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

WORDS = ("alpha", "beta", "gamma", "delta", "omega", "sigma", "kappa", "lambda", "theta", "zeta", "eta", "rho")


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--model", default="")
    p.add_argument("--served-model-name", default="fake")
    p.add_argument("--slots", type=int, default=16)
    p.add_argument("--token-delay", type=float, default=0.002)
    p.add_argument("--lossy", action="store_true")
    p.add_argument("--fail-every", type=int, default=0)
    p.add_argument("--short", action="store_true")
    p.add_argument("--spec-type", default="")
    p.add_argument("--spec-drafts", type=int, default=1)
    p.add_argument("--ignore-flag", default="")
    p.add_argument("--escape", default="")
    p.add_argument("--children", type=int, default=0)
    p.add_argument("--ignore-sigterm", action="store_true")
    p.add_argument("--exit-at-start", action="store_true")
    p.add_argument("--startup-delay", type=float, default=0.0)
    p.add_argument("--pidfile", default="")
    return p.parse_args()


ARGS = parse()
STATE = {"running": 0, "waiting": 0, "requests": 0, "drafts": 0, "tokens": 0}
LOCK = threading.Lock()
SLOTS = threading.Semaphore(ARGS.slots)


def answer_words(prompt: str, n: int) -> list[str]:
    out = []
    for i in range(n):
        h = hashlib.sha256(f"{prompt}|{i}".encode()).digest()
        w = WORDS[h[0] % len(WORDS)]
        if ARGS.lossy and i % 3 == 1:
            w = WORDS[(h[0] + 5) % len(WORDS)]
        out.append(w)
    return out


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # small SSE chunks: without it, Nagle + delayed ACK add ~40 ms per chunk

    def log_message(self, *a):  # quiet
        pass

    def _json(self, code: int, obj) -> None:
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path == "/health":
            return self._json(200, {"status": "ok"})
        if self.path == "/props":
            return self._json(200, {"slots": ARGS.slots, "spec_type": ARGS.spec_type or None,
                                    "token_delay": ARGS.token_delay, "version": "fake-1"})
        if self.path == "/metrics":
            with LOCK:
                s = dict(STATE)
            text = (
                "# TYPE fake:running gauge\n"
                f"fake:running {s['running']}\n"
                "# TYPE fake:waiting gauge\n"
                f"fake:waiting {s['waiting']}\n"
                "# TYPE fake:drafts counter\n"
                f"fake:drafts_total {s['drafts']}\n"
                "# TYPE fake:requests counter\n"
                f"fake:requests_total {s['requests']}\n"
            ).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(text)))
            self.end_headers()
            self.wfile.write(text)
            return
        self._json(404, {"error": "not found"})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        body = json.loads(self.rfile.read(length) or b"{}")
        if self.path not in ("/v1/completions", "/v1/chat/completions"):
            return self._json(404, {"error": "not found"})
        with LOCK:
            STATE["requests"] += 1
            n = STATE["requests"]
        if ARGS.fail_every and n % ARGS.fail_every == 0:
            return self._json(500, {"error": {"message": "injected failure"}})
        prompt = body.get("prompt") or json.dumps(body.get("messages"))
        max_tokens = int(body.get("max_tokens", 16))
        produce = max_tokens // 2 if ARGS.short else max_tokens
        with LOCK:
            STATE["waiting"] += 1
        SLOTS.acquire()
        with LOCK:
            STATE["waiting"] -= 1
            STATE["running"] += 1
        try:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()

            def chunk(data: str) -> None:
                raw = f"data: {data}\n\n".encode()
                self.wfile.write(f"{len(raw):x}\r\n".encode() + raw + b"\r\n")
                self.wfile.flush()

            for i, w in enumerate(answer_words(prompt, produce)):
                time.sleep(ARGS.token_delay)
                if ARGS.spec_type and ARGS.spec_drafts and i % 4 == 0:
                    with LOCK:
                        STATE["drafts"] += 1
                piece = (" " if i else "") + w
                key = "text" if self.path == "/v1/completions" else "delta"
                choice = {"index": 0, key: piece if key == "text" else {"content": piece}}
                chunk(json.dumps({"choices": [choice]}))
            chunk(json.dumps({"choices": [], "usage": {"completion_tokens": produce}}))
            chunk("[DONE]")
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        finally:
            with LOCK:
                STATE["running"] -= 1
            SLOTS.release()


def write_pid(path: str) -> None:
    """Whole or not at all: a reader polling for the file never sees it empty."""
    with open(path + ".part", "w") as f:
        f.write(str(os.getpid()))
    os.replace(path + ".part", path)


def spawn_escapee(pidfile: str) -> None:
    """A grandchild in its own session (setsid + double fork): outside the server's process group."""
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            write_pid(pidfile)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            while True:
                time.sleep(1)
        os._exit(0)


def spawn_children(n: int) -> None:
    for _ in range(n):
        if os.fork() == 0:
            while True:
                time.sleep(1)


def main() -> None:
    if ARGS.pidfile:
        write_pid(ARGS.pidfile)
    if ARGS.ignore_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    print(f"fake server starting: {json.dumps(vars(ARGS), sort_keys=True)}", flush=True)
    if ARGS.exit_at_start:
        print("RuntimeError: fake engine refuses this configuration", flush=True)
        sys.exit(3)
    if ARGS.escape:
        spawn_escapee(ARGS.escape)
    spawn_children(ARGS.children)
    time.sleep(ARGS.startup_delay)
    ThreadingHTTPServer.request_queue_size = 256  # socketserver's default 5 drops SYNs of a burst: 1 s retries
    srv = ThreadingHTTPServer((ARGS.host, ARGS.port), Handler)
    srv.daemon_threads = True
    print(f"serving on {ARGS.host}:{ARGS.port}", flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
