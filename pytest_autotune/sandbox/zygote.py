"""The zygote: a clean process that has imported torch once and forks a fresh sandbox per candidate.

Importing torch costs ~2 s here; forking a process that already has it costs milliseconds. The zygote is
started with a scrubbed environment and the protocol's thread counts (so it holds no thread pools and forking
is safe), never loads a candidate, and never holds golden outputs or secrets. Each forked sandbox gets its own
process group (the controller kills the group on timeout or memory blow-up) and its own log file.

Control protocol (SOCK_SEQPACKET, one JSON object per packet): ``{"cmd":"fork","log":path}`` + one fd →
``{"pid":n}``; ``{"cmd":"wait","pid":n,"timeout":s}`` → ``{"status":"exited","code":c}`` |
``{"status":"signaled","signal":s}`` | ``{"status":"running"}``; ``{"cmd":"exit"}``.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time


def _wait(pid: int, timeout: float) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        try:
            got, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return {"status": "unknown"}
        if got == pid:
            if os.WIFSIGNALED(status):
                return {"status": "signaled", "signal": os.WTERMSIG(status)}
            return {"status": "exited", "code": os.WEXITSTATUS(status)}
        if time.monotonic() >= deadline:
            return {"status": "running"}
        time.sleep(0.005)


def _run_child(fd: int, log: str) -> int:
    os.setpgid(0, 0)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    try:
        out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(out, 1)
        os.dup2(out, 2)
        os.close(out)
    except OSError:
        pass
    from .child import main

    return main(fd)


def serve(ctl: socket.socket) -> None:
    while True:
        try:
            data, fds, _flags, _addr = socket.recv_fds(ctl, 1 << 16, 4)
        except OSError:
            return
        if not data:
            return
        req = json.loads(data)
        cmd = req.get("cmd")
        if cmd == "fork":
            pid = os.fork()
            if pid == 0:
                code = 70
                try:
                    ctl.close()
                    code = _run_child(fds[0], req["log"])
                except BaseException:  # noqa: BLE001
                    import traceback

                    traceback.print_exc()
                finally:
                    sys.stdout.flush()
                    sys.stderr.flush()
                    os._exit(code)
            for fd in fds:
                os.close(fd)
            ctl.send(json.dumps({"pid": pid}).encode())
        elif cmd == "wait":
            ctl.send(json.dumps(_wait(int(req["pid"]), float(req.get("timeout", 0)))).encode())
        elif cmd == "exit":
            return
        else:
            ctl.send(json.dumps({"error": f"unknown command {cmd!r}"}).encode())


def main() -> None:
    fd = int(sys.argv[1])
    for p in json.loads(os.environ.pop("AUTOTUNE_SANDBOX_SYS_PATH", "[]")):
        if p not in sys.path:
            sys.path.append(p)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C goes to the controller, which tears us down
    # preload what every sandbox needs; nothing that starts threads or touches a GPU
    import numpy  # noqa: F401
    import torch  # noqa: F401

    from . import child  # noqa: F401

    ctl = socket.socket(fileno=fd)
    ctl.send(json.dumps({"ready": True, "pid": os.getpid()}).encode())
    serve(ctl)


if __name__ == "__main__":
    main()
