"""A scripted OpenAI-compatible endpoint for the LLM tuner's tests: ``POST /v1/chat/completions`` answers with the
next scripted reply (a chat.completion body, or an HTTP error), and keeps every request it was sent (headers
included) for the tests to read. A threaded ``http.server`` on 127.0.0.1; nothing else."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Optional


@dataclass
class Scripted:
    content: Optional[str] = None
    finish_reason: str = "stop"
    status: int = 200
    delay_s: float = 0.0
    completion_tokens: Optional[int] = None  # default: the request's max_tokens when cut off, else ~len/4


@dataclass
class Endpoint:
    script: list[Scripted]
    requests: list[dict[str, Any]] = field(default_factory=list)
    server: Optional[ThreadingHTTPServer] = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self) -> "Endpoint":
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                endpoint.requests.append({"path": self.path, "headers": dict(self.headers), "body": body})
                step = endpoint.script.pop(0) if endpoint.script else Scripted("(script exhausted)")
                time.sleep(step.delay_s)
                # "{AUTH}" in a scripted reply echoes the request's Authorization header (an endpoint that leaks
                # the key back: the search must redact it before writing anything)
                content = (step.content or "").replace("{AUTH}", self.headers.get("Authorization", ""))
                if step.status != 200:
                    payload: dict[str, Any] = {"error": {"message": f"scripted HTTP {step.status}",
                                                         "type": "server_error"}}
                else:
                    cap = body.get("max_tokens") or 16
                    n = step.completion_tokens or (cap if step.finish_reason == "length"
                                                   else max(1, len(content) // 4))
                    payload = {"id": f"chatcmpl-{len(endpoint.requests)}", "object": "chat.completion",
                               "created": 0, "model": body.get("model"),
                               "choices": [{"index": 0, "finish_reason": step.finish_reason,
                                            "message": {"role": "assistant", "content": content}}],
                               "usage": {"prompt_tokens": 100, "completion_tokens": n, "total_tokens": 100 + n}}
                data = json.dumps(payload).encode()
                try:
                    self.send_response(step.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (its timeout)
                    pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.shutdown()
        self.server.server_close()
