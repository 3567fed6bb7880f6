"""The engine-server supervisor: a small process between pytest and a server that makes sure the server and
every process it started die with it, whatever happens to pytest.

Why a separate process (docs/guide/engines.md#stopping-servers): a server such as vLLM is a tree of processes
(API server, engine core, workers, resource tracker). pytest can stop it in a ``finally`` block on failure or
Ctrl-C, but when pytest itself is killed (SIGKILL, the OOM killer, a CI timeout) no code of pytest runs. The
supervisor notices that its parent is gone in two independent ways, ``PR_SET_PDEATHSIG`` (the kernel sends it
SIGTERM) and end-of-file on the pipe from pytest, and then kills the server's tree. It is a *child subreaper*
(``PR_SET_CHILD_SUBREAPER``): any process of the tree whose parent dies is re-parented to the supervisor, not to
init, so a descendant that left the server's process group (``setsid``, a double fork) is still found and
killed. The server's own process is started with ``PR_SET_PDEATHSIG = SIGKILL`` towards the supervisor, so even
a SIGKILL of the supervisor takes the server's main process down.

Protocol on stdin/stdout, one JSON object per line:
  parent → {"argv": [...], "env": {...}, "cwd": "...", "log": "...", "grace_s": 10}
  supervisor → {"started": pid}            (or {"error": "..."} and exit)
  parent → "stop"                           (or end of file, or SIGTERM/SIGHUP/SIGINT-free: SIGINT is ignored)
  supervisor → {"exited": returncode, "by": "stop"|"self"|"parent gone"} then exits after the tree is gone.

Linux-only; this module is also the only place that calls ``prctl``.
"""

from __future__ import annotations

import ctypes
import json
import os
import select
import signal
import subprocess
import sys
import time
from typing import Optional

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36

_libc = None


def _prctl(option: int, arg: int) -> bool:
    global _libc
    try:
        if _libc is None:
            _libc = ctypes.CDLL(None, use_errno=True)
        return _libc.prctl(option, arg, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def set_pdeathsig(sig: int) -> bool:
    """Ask the kernel to send ``sig`` to this process when its parent thread exits."""
    return _prctl(PR_SET_PDEATHSIG, int(sig))


def descendants(root: int) -> list[int]:
    """Every live process whose parent chain reaches ``root`` (read from /proc), deepest last."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read().decode("utf-8", "replace")
        except OSError:
            continue
        # the command name is in parentheses and may contain spaces: fields after the last ')'
        rest = stat[stat.rfind(")") + 2:].split()
        if len(rest) < 2:
            continue
        state, ppid = rest[0], int(rest[1])
        if state == "Z":  # a zombie is dead already; reaping it is enough
            continue
        children.setdefault(ppid, []).append(int(entry))
    out: list[int] = []
    stack = [root]
    while stack:
        p = stack.pop()
        for c in children.get(p, []):
            out.append(c)
            stack.append(c)
    return out


def _signal_all(pids: list[int], sig: int) -> None:
    for p in pids:
        try:
            os.kill(p, sig)
        except (ProcessLookupError, PermissionError):
            pass


#: exit statuses of processes this supervisor reaped (the server's among them: Popen.poll() cannot see it then)
_REAPED: dict[int, int] = {}


def _reap() -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        _REAPED[pid] = os.waitstatus_to_exitcode(status)


def _returncode(server: subprocess.Popen) -> Optional[int]:
    if server.pid in _REAPED:
        return _REAPED[server.pid]
    return server.poll()


def kill_tree(server: Optional[subprocess.Popen], grace_s: float) -> None:
    """SIGTERM the server's process group and every descendant of this process, wait up to ``grace_s`` for
    them to exit, then SIGKILL what is left, until nothing is left."""
    me = os.getpid()
    if server is not None:
        try:
            os.killpg(server.pid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass
    _signal_all(descendants(me), signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        _reap()
        if not descendants(me):
            return
        time.sleep(0.05)
    for _ in range(50):
        left = descendants(me)
        if not left:
            return
        if server is not None:
            try:
                os.killpg(server.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        _signal_all(left, signal.SIGKILL)
        time.sleep(0.05)
        _reap()


def _say(obj: dict) -> None:
    try:
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()
    except (BrokenPipeError, OSError):
        pass


def _child_setup() -> None:  # runs in the server process between fork and exec
    set_pdeathsig(signal.SIGKILL)


def main() -> int:
    parent = os.getppid()
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    set_pdeathsig(signal.SIGTERM)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is pytest's to handle; it then tells us to stop
    stop_requested = {"why": ""}

    def on_term(signum, frame):  # noqa: ARG001
        stop_requested["why"] = "parent gone" if os.getppid() != parent else f"signal {signum}"

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGHUP, on_term)
    if os.getppid() != parent:  # the parent died before PDEATHSIG was armed
        return 0

    line = sys.stdin.readline()
    if not line:
        return 0
    try:
        spec = json.loads(line)
        log = open(spec["log"], "ab", buffering=0)
        server = subprocess.Popen(spec["argv"], env=spec["env"], cwd=spec.get("cwd") or None,
                                  stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                  start_new_session=True, preexec_fn=_child_setup, close_fds=True)
    except Exception as e:  # noqa: BLE001 - reported to the parent, which raises it
        _say({"error": f"{type(e).__name__}: {e}"})
        return 1
    grace = float(spec.get("grace_s", 10.0))
    _say({"started": server.pid})
    by = ""
    stdin_fd = sys.stdin.fileno()
    while not by:
        if stop_requested["why"]:
            by = stop_requested["why"]
            break
        if os.getppid() != parent:
            by = "parent gone"
            break
        try:
            ready, _, _ = select.select([stdin_fd], [], [], 0.2)
        except InterruptedError:
            continue
        if ready:
            data = os.read(stdin_fd, 4096)
            if not data:
                by = "parent gone"  # end of file: the parent closed the pipe or died
            elif b"stop" in data:
                by = "stop"
        _reap()
        if _returncode(server) is not None and not by:
            # the server exited on its own: clear what it left behind, say so, and wait for stop/EOF
            kill_tree(None, 1.0)
            _say({"exited": _returncode(server), "by": "self"})
            by = "self"
    kill_tree(server, grace)
    rc = _returncode(server)
    if by != "self":
        _say({"exited": rc, "by": by})
        return 0
    # the server is gone; wait for the parent to acknowledge (stop or EOF) so it can read the exit status
    while os.getppid() == parent and not stop_requested["why"]:
        ready, _, _ = select.select([stdin_fd], [], [], 0.5)
        if ready and not os.read(stdin_fd, 4096):
            break
        if ready:
            break
    kill_tree(None, 1.0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
