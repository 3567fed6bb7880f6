"""The sandbox's processes as the controller holds them: the zygote they are forked from (a client of
:mod:`.zygote`), a handle per sandbox process (kill, kill its group, exit status), and the kinds of failure a
sandbox ends in (:class:`SandboxFailure`). :mod:`.runner` starts sandboxes and talks to them through these.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from . import linux
from .environment import sandbox_env
from .jail_plan import ENV_PLAN, JailPlan


@dataclass
class SandboxFailure(Exception):
    """The sandbox process did not answer properly. ``kind``: crash | timeout | memory | protocol | start."""

    kind: str
    detail: str
    log_tail: str = ""

    def __str__(self) -> str:
        shown = f"\n--- sandbox output (last lines) ---\n{self.log_tail}" if self.log_tail.strip() else ""
        return f"{self.kind.upper()}: {self.detail}{shown}"


def describe_status(st: dict) -> str:
    if st.get("status") == "signaled":
        sig = st["signal"]
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = str(sig)
        return f"killed by {name}"
    if st.get("status") == "exited":
        return f"exited with code {st['code']}"
    return "ended"


class Zygote:
    """The controller's end of one zygote (:mod:`.zygote`): started with the jail plan, asked to fork a sandbox
    onto a socket, to report a sandbox's exit status, and to exit."""

    def __init__(self, threads: int, workdir: Path, start_timeout: float, env_extra: Optional[dict] = None,
                 plan: Optional[JailPlan] = None, *, wait: bool = True) -> None:
        """``wait=False``: return once the process is launched; :meth:`ready` (called by :meth:`fork`) waits for it
        to be jailed and serving. The zygote then imports torch while the controller goes on."""
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        env = sandbox_env(threads, env_extra)
        env["AUTOTUNE_SANDBOX_SYS_PATH"] = json.dumps([p for p in sys.path if p])
        env["PYTHONPATH"] = package_root()
        env[ENV_PLAN] = json.dumps((plan or JailPlan()).to_json())
        self.log = workdir / "zygote.log"
        self.start_timeout = start_timeout
        self._ready = False
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "pytest_autotune.sandbox.zygote", str(child.fileno())],
                pass_fds=[child.fileno()], env=env, cwd=str(workdir), stdin=subprocess.DEVNULL,
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )
        child.close()
        self.ctl = parent
        #: one request at a time on the control socket: the build pool forks and reaps from several threads
        self._lock = threading.Lock()
        if wait:
            self.ready()

    def ready(self) -> None:
        """Wait (once) for the zygote's hello: it is jailed and serves forks."""
        if self._ready:
            return
        self.ctl.settimeout(self.start_timeout)
        try:
            hello = json.loads(self.ctl.recv(1 << 16) or b"{}")
        except (OSError, ValueError) as e:
            self.close()
            raise SandboxFailure("start", f"the sandbox zygote did not start ({e})", tail(self.log)) from None
        if not hello.get("ready"):
            self.close()
            why = f": the jail failed at {hello['error']}" if hello.get("error") else ""
            raise SandboxFailure("start", f"the sandbox zygote did not start{why}", tail(self.log))
        self.ctl.settimeout(30)
        self._ready = True

    def alive(self) -> bool:
        return self.proc.poll() is None

    def fork(self, fd: int, log: Path) -> tuple[int, int, Optional[int]]:
        """(pid in the controller's pid namespace, pid in the zygote's, the task limit's listener or None: the
        caller's to serve or close). The log file is opened here, by the controller: the zygote's view of the file
        system is read-only."""
        with self._lock:
            self.ready()
            log_fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                socket.send_fds(self.ctl, [json.dumps({"cmd": "fork", "log": str(log)}).encode()], [fd, log_fd])
            finally:
                os.close(log_fd)
            data, fds, _flags, _addr = socket.recv_fds(self.ctl, 1 << 16, 2)
        reply = json.loads(data)
        zpid = int(reply["pid"])
        host, listener = None, None
        for name, got in zip(reply.get("fds") or ["pidfd"] * len(fds), fds):
            if name == "listener":
                listener = got
            else:
                host = linux.pid_from_pidfd(got)
                os.close(got)
        if reply.get("jail_error"):
            if listener is not None:
                os.close(listener)
            raise SandboxFailure("start", f"the sandbox could not be jailed (step {reply.get('step')}: "
                                 f"{reply['jail_error']}); nothing of the candidate ran", tail(log))
        return (host if host is not None else zpid), zpid, listener

    def wait(self, pid: int, timeout: float) -> dict:
        """``pid``: the zygote's pid of the sandbox."""
        with self._lock:
            self.ctl.send(json.dumps({"cmd": "wait", "pid": pid, "timeout": timeout}).encode())
            return json.loads(self.ctl.recv(1 << 16))

    def close(self) -> None:
        try:
            self.ctl.send(json.dumps({"cmd": "exit"}).encode())
        except OSError:
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.ctl.close()


def package_root() -> str:
    """The folder holding the pytest_autotune package, so ``-m pytest_autotune...`` always resolves."""
    return str(Path(__file__).resolve().parents[2])


def tail(path: Path, n: int = 25) -> str:
    try:
        data = path.read_bytes()[-8000:]
    except OSError:
        return ""
    return "\n".join(data.decode("utf-8", "replace").splitlines()[-n:])

class Handle:
    pid: int
    #: the task limit's listener, served by the pool's supervisor until the sandbox is closed
    listener: Optional[int] = None

    def kill(self) -> None:
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            try:
                os.kill(self.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def kill_group(self) -> None:
        """SIGKILL whatever is left in the sandbox's process group (it leads its own group)."""
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def status(self, timeout: float) -> dict:
        raise NotImplementedError


class ZygoteHandle(Handle):
    def __init__(self, pid: int, zygote: Zygote, zpid: Optional[int] = None) -> None:
        self.pid = pid  # in the controller's pid namespace
        self.zpid = pid if zpid is None else zpid  # in the zygote's (it is in a pid namespace of its own)
        self.zygote = zygote

    def status(self, timeout: float) -> dict:
        try:
            return self.zygote.wait(self.zpid, timeout)
        except OSError:
            return {"status": "unknown"}


class PopenHandle(Handle):
    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc = proc
        self.pid = proc.pid

    def status(self, timeout: float) -> dict:
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"status": "running"}
        if code < 0:
            return {"status": "signaled", "signal": -code}
        return {"status": "exited", "code": code}

def rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return 0
    return 0


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        return stat[stat.rfind(b")") + 2:][:1] != b"Z"
    except OSError:
        return False
