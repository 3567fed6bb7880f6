"""The zygote: a clean process that has imported torch once and forks a fresh sandbox per candidate.

Importing torch costs ~2 s here; forking a process that already has it costs milliseconds. The zygote is
started with a scrubbed environment and the protocol's thread counts (so it holds no thread pools and forking
is safe), never loads a candidate, and never holds golden outputs or secrets. Each forked sandbox gets its own
process group (the controller kills the group on timeout or memory blow-up) and its own log file.

The jail (:mod:`.jail`, docs/design/threat-model.md): the controller hands the zygote its plan in the environment;
the zygote enters the session's part first thing, before it imports anything (a user namespace needs a
single-threaded process), and forks every sandbox into fresh namespaces of its own, which the sandbox completes
and locks (uid, capabilities, seccomp) before it reads its first command.

Control protocol (SOCK_SEQPACKET, one JSON object per packet): ``{"cmd":"fork","log":path}`` + the sandbox's
socket fd and, optionally, its log file's fd → ``{"pid":n,"fds":[names]}`` + a pidfd of the sandbox when there is
one (the controller reads the sandbox's pid in its own pid namespace from it) and the task limit's listener where
the plan has one (:mod:`.task_limit`: the controller's supervisor answers it), in the order ``fds`` names them, or ``{"pid":n,"jail_error":...,
"step":...}`` when the sandbox could not be jailed (it has then exited without running anything);
``{"cmd":"wait","pid":n,"timeout":s}`` (n: the zygote's pid of the sandbox) → ``{"status":"exited","code":c}`` |
``{"status":"signaled","signal":s}`` | ``{"status":"running"}``; ``{"cmd":"exit"}``.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time
from typing import Optional

from .jail import enter_session, fork_jailed
from .jail_plan import ENV_PLAN, JailError, JailPlan


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


def _run_child(fd: int, log: str, log_fd: int = -1) -> int:
    os.setpgid(0, 0)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    try:
        out = log_fd if log_fd >= 0 else os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(out, 1)
        os.dup2(out, 2)
        os.close(out)
    except OSError:
        pass
    from .child import main

    return main(fd)


def serve(ctl: socket.socket, plan: "JailPlan", p0: Optional[int] = None) -> None:
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
            log_fd = fds[1] if len(fds) > 1 else -1

            def run(fds: list = fds, req: dict = req, log_fd: int = log_fd) -> int:
                code = 70
                try:
                    ctl.close()
                    code = _run_child(fds[0], req["log"], log_fd)
                except BaseException:  # noqa: BLE001
                    import traceback

                    traceback.print_exc()
                finally:
                    sys.stdout.flush()
                    sys.stderr.flush()
                return code

            try:
                pid, pidfd, failure, listener = fork_jailed(plan, p0, run)
            except OSError as e:
                for fd in fds:
                    os.close(fd)
                ctl.send(json.dumps({"pid": 0, "jail_error": f"fork: {e}", "step": "pid"}).encode())
                continue
            for fd in fds:
                os.close(fd)
            if failure is not None:
                ctl.send(json.dumps({"pid": pid, "jail_error": failure["error"], "step": failure["step"]}).encode())
            else:
                # the pidfd, and the task limit's listener for the controller's supervisor; the zygote keeps neither
                # (a later sandbox must not inherit another's listener)
                named = [(n, fd) for n, fd in (("pidfd", pidfd), ("listener", listener)) if fd is not None]
                msg = json.dumps({"pid": pid, "fds": [n for n, _ in named]}).encode()
                if named:
                    socket.send_fds(ctl, [msg], [fd for _, fd in named])
                else:
                    ctl.send(msg)
            for held in (pidfd, listener):
                if held is not None:
                    os.close(held)
        elif cmd == "wait":
            ctl.send(json.dumps(_wait(int(req["pid"]), float(req.get("timeout", 0)))).encode())
        elif cmd == "exit":
            return
        else:
            ctl.send(json.dumps({"error": f"unknown command {cmd!r}"}).encode())


def main() -> None:
    fd = int(sys.argv[1])
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C goes to the controller, which tears us down
    plan = JailPlan.from_json(json.loads(os.environ.pop(ENV_PLAN, "{}") or "{}"))
    try:  # first: a user namespace needs a process with one thread; nothing imported yet starts one
        p0 = enter_session(plan)
    except JailError as e:
        socket.socket(fileno=fd).send(json.dumps({"ready": False, "error": str(e), "step": e.step}).encode())
        sys.exit(71)
    for p in json.loads(os.environ.pop("AUTOTUNE_SANDBOX_SYS_PATH", "[]")):
        if p not in sys.path:
            sys.path.append(p)
    # preload what every sandbox needs; nothing that starts threads or touches a GPU
    import numpy  # noqa: F401
    import torch  # noqa: F401

    from . import child  # noqa: F401
    from .environment import no_progress_monitor

    no_progress_monitor()

    if plan.seccomp:  # loaded once here, not in every sandbox
        from .seccomp_filter import bindings

        bindings()

    ctl = socket.socket(fileno=fd)
    ctl.send(json.dumps({"ready": True, "pid": os.getpid()}).encode())
    serve(ctl, plan, p0)
    leave()


def leave() -> None:
    """Exit once ``serve`` is done (the controller said ``exit`` or is gone). The zygote holds no file but its log
    (stdout and stderr) and registers nothing it needs at exit, so it flushes the log and leaves with ``os._exit``:
    Python's own teardown of torch took ~0.8 s here, which the controller's ``close`` waited out (docs/results/test-suite.md#process-exits-jail-and-catalog-2026-12-02-e421431). Its sandboxes are killed by the kernel with it where it leads a pid namespace, else by the
    controller (every ``Sandbox.close`` kills and reaps its process group)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(0)


if __name__ == "__main__":
    main()
