"""Controller side of the sandbox: start isolated processes, talk to them, enforce timeout and memory limit.

:class:`SandboxPool` owns one zygote per controller/worker process (Linux) or spawns a fresh interpreter per
sandbox elsewhere. :class:`Sandbox` is one isolated process running one candidate; every request goes through
:meth:`Sandbox.request`, which turns a crash, hang or memory blow-up into a :class:`SandboxFailure`.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from .wire import Channel, PeerGone, WireError, WireTimeout

_KEEP_ENV = (
    "PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR", "TEMP", "TMP", "USER", "LOGNAME", "SHELL",
    "LD_LIBRARY_PATH", "DYLD_LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH", "TRITON_CACHE_DIR", "TORCH_HOME",
    "TORCHINDUCTOR_CACHE_DIR", "CC", "CXX", "SYSTEMROOT", "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE",
    "VIRTUAL_ENV", "NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS",
)
_KEEP_PREFIXES = ("CUDA_", "NVIDIA_", "HIP_", "MLX_")
_THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "VECLIB_MAXIMUM_THREADS",
                "NUMEXPR_NUM_THREADS", "BLIS_NUM_THREADS")


def sandbox_env(threads: int, extra: Optional[dict[str, str]] = None) -> dict[str, str]:
    """A scrubbed environment: nothing of pytest's or ours (no database path, no run secrets)."""
    env = {k: v for k, v in os.environ.items() if k in _KEEP_ENV or k.startswith(_KEEP_PREFIXES)}
    for k in _THREAD_VARS:
        env[k] = str(threads)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PYTHONHASHSEED"] = "0"
    env.update(extra or {})
    return env


@dataclass
class SandboxFailure(Exception):
    """The sandbox process did not answer properly. ``kind``: crash | timeout | memory | protocol | start."""

    kind: str
    detail: str
    log_tail: str = ""

    def __str__(self) -> str:
        tail = f"\n--- sandbox output (last lines) ---\n{self.log_tail}" if self.log_tail.strip() else ""
        return f"{self.kind.upper()}: {self.detail}{tail}"


def _rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return 0
    return 0


def _describe_status(st: dict) -> str:
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


class _Zygote:
    def __init__(self, threads: int, workdir: Path, start_timeout: float, env_extra: Optional[dict] = None) -> None:
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        env = sandbox_env(threads, env_extra)
        env["AUTOTUNE_SANDBOX_SYS_PATH"] = json.dumps([p for p in sys.path if p])
        env["PYTHONPATH"] = _package_root()
        self.log = workdir / "zygote.log"
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "pytest_autotune.sandbox.zygote", str(child.fileno())],
                pass_fds=[child.fileno()], env=env, cwd=str(workdir), stdin=subprocess.DEVNULL,
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )
        child.close()
        self.ctl = parent
        self.ctl.settimeout(start_timeout)
        try:
            hello = json.loads(self.ctl.recv(1 << 16) or b"{}")
        except (OSError, ValueError) as e:
            self.close()
            raise SandboxFailure("start", f"the sandbox zygote did not start ({e})", _tail(self.log)) from None
        if not hello.get("ready"):
            self.close()
            raise SandboxFailure("start", "the sandbox zygote did not start", _tail(self.log))
        self.ctl.settimeout(30)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def fork(self, fd: int, log: Path) -> int:
        socket.send_fds(self.ctl, [json.dumps({"cmd": "fork", "log": str(log)}).encode()], [fd])
        return int(json.loads(self.ctl.recv(1 << 16))["pid"])

    def wait(self, pid: int, timeout: float) -> dict:
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


def _package_root() -> str:
    """The folder holding the pytest_autotune package, so ``-m pytest_autotune...`` always resolves."""
    return str(Path(__file__).resolve().parents[2])


def _tail(path: Path, n: int = 25) -> str:
    try:
        data = path.read_bytes()[-8000:]
    except OSError:
        return ""
    return "\n".join(data.decode("utf-8", "replace").splitlines()[-n:])


class SandboxPool:
    """Starts sandboxes. ``mode``: "zygote" (fork from a pre-warmed clean process; Linux) or "spawn"."""

    def __init__(self, threads: int, timeout_s: float, memory_mb: int, start_timeout_s: float,
                 mode: Optional[str] = None, env_extra: Optional[dict[str, str]] = None) -> None:
        self.threads = threads
        self.timeout_s = timeout_s
        self.memory_bytes = memory_mb << 20
        self.start_timeout_s = start_timeout_s
        self.mode = mode or ("zygote" if sys.platform.startswith("linux") else "spawn")
        self.env_extra = dict(env_extra or {})
        self.workdir = Path(tempfile.mkdtemp(prefix="autotune-sandbox-"))
        self._zygote: Optional[_Zygote] = None
        self._count = 0

    def _get_zygote(self) -> _Zygote:
        if self._zygote is None or not self._zygote.alive():
            self._zygote = _Zygote(self.threads, self.workdir, self.start_timeout_s, self.env_extra)
        return self._zygote

    def start(self, init: dict[str, Any], label: str = "sandbox") -> "Sandbox":
        self._count += 1
        log = self.workdir / f"{self._count:04d}-{_safe(label)}.log"
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            if self.mode == "zygote":
                z = self._get_zygote()
                pid = z.fork(theirs.fileno(), log)
                handle: _Handle = _ZygoteHandle(pid, z)
            else:
                env = sandbox_env(self.threads, self.env_extra)
                env["PYTHONPATH"] = os.pathsep.join([_package_root()] + [p for p in sys.path if p])
                with open(log, "wb") as lf:
                    proc = subprocess.Popen(
                        [sys.executable, "-m", "pytest_autotune.sandbox.child", str(theirs.fileno())],
                        pass_fds=[theirs.fileno()], env=env, cwd=str(self.workdir), stdin=subprocess.DEVNULL,
                        stdout=lf, stderr=subprocess.STDOUT, start_new_session=True,
                    )
                handle = _PopenHandle(proc)
        finally:
            theirs.close()
        box = Sandbox(Channel(ours), handle, log, self)
        box.hello = box.request(init, timeout=self.start_timeout_s + self.timeout_s, phase="load")
        return box

    def close(self) -> None:
        if self._zygote is not None:
            self._zygote.close()
            self._zygote = None


def _safe(s: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in s)[:80]


class _Handle:
    pid: int

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


class _ZygoteHandle(_Handle):
    def __init__(self, pid: int, zygote: _Zygote) -> None:
        self.pid = pid
        self.zygote = zygote

    def status(self, timeout: float) -> dict:
        try:
            return self.zygote.wait(self.pid, timeout)
        except OSError:
            return {"status": "unknown"}


class _PopenHandle(_Handle):
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


class Sandbox:
    """One isolated process. Use as a context manager; :meth:`close` always kills and reaps it."""

    def __init__(self, chan: Channel, handle: _Handle, log: Path, pool: SandboxPool) -> None:
        self.chan = chan
        self.handle = handle
        self.log = log
        self.pool = pool
        self.hello: dict = {}
        self.peak_rss = 0
        self.closed = False

    @property
    def pid(self) -> int:
        return self.handle.pid

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _watchdog(self) -> None:
        rss = _rss_bytes(self.handle.pid)
        self.peak_rss = max(self.peak_rss, rss)
        if rss > self.pool.memory_bytes:
            self.handle.kill()
            raise SandboxFailure(
                "memory",
                f"sandbox used {rss / 2**20:.0f} MiB, over the protocol's limit of "
                f"{self.pool.memory_bytes / 2**20:.0f} MiB ([sandbox].memory_mb); it was killed",
                _tail(self.log),
            )

    def request(self, msg: dict[str, Any], timeout: Optional[float] = None, phase: str = "") -> dict[str, Any]:
        """Send ``msg``, wait for the answer. Raises :class:`SandboxFailure` on crash/hang/memory/garbage."""
        self.send(msg, phase)
        return self.receive(timeout, phase or str(msg.get("cmd")))

    def send(self, msg: dict[str, Any], phase: str = "") -> None:
        """Send without waiting, so the controller can work (golden outputs) while the sandbox computes."""
        try:
            self.chan.send(msg)
        except PeerGone:
            st = self.handle.status(2.0)
            raise SandboxFailure("crash", f"the sandbox died before {phase or msg.get('cmd')} "
                                 f"({_describe_status(st)})", _tail(self.log)) from None

    def receive(self, timeout: Optional[float] = None, phase: str = "") -> dict[str, Any]:
        timeout = self.pool.timeout_s if timeout is None else timeout
        phase = phase or "a request"
        try:
            reply = self.chan.recv(timeout=timeout, watchdog=self._watchdog)
        except WireTimeout:
            self.handle.kill()
            raise SandboxFailure(
                "timeout", f"no answer within {timeout:.0f} s during {phase} "
                "([sandbox].timeout_s); the sandbox was killed", _tail(self.log)) from None
        except PeerGone:
            st = self.handle.status(2.0)
            raise SandboxFailure(
                "crash", f"the sandbox died during {phase} ({_describe_status(st)})",
                _tail(self.log)) from None
        except WireError as e:
            self.handle.kill()
            raise SandboxFailure("protocol", f"the sandbox sent an invalid message: {e}", _tail(self.log)) from None
        if not isinstance(reply, dict):
            self.handle.kill()
            raise SandboxFailure("protocol", "the sandbox sent a non-object reply", _tail(self.log))
        return reply

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            self.chan.send({"cmd": "bye"})
            self.chan.recv(timeout=2.0)
        except Exception:  # noqa: BLE001
            pass
        self.chan.close()
        st = self.handle.status(1.0)
        if st.get("status") == "running":
            self.handle.kill()
            self.handle.status(5.0)
        else:
            # the sandbox is gone, but processes it forked may live on in its process group (a helper that
            # burns CPU while later items are timed): the group goes with it
            self.handle.kill_group()
