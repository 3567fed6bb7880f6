"""Starting and always stopping one engine server.

:class:`EngineServer` is a context manager: it picks a free port on 127.0.0.1, starts the server through the
supervisor (:mod:`pytest_autotune.engines.supervisor`, which kills the server's whole tree when pytest dies in
any way), waits for the health endpoint with a timeout, keeps the server's log, and stops the tree on exit —
after a failure, on Ctrl-C (``KeyboardInterrupt`` unwinds through ``__exit__``) and at interpreter exit
(``atexit``, for servers a caller forgot). Nothing binds anything but 127.0.0.1.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, Sequence

import httpx

from ..errors import AutotuneError
from . import localhttp

HOST = "127.0.0.1"


class EngineLaunchError(AutotuneError):
    """The server did not come up (exited, or no healthy answer within the timeout); carries the log tail."""

    def __init__(self, message: str, log: Optional[Path] = None, tail: str = "") -> None:
        cause = root_cause(tail)
        super().__init__(message + (f": {cause}" if cause else "")
                         + (f"\n--- last lines of {log} ---\n{tail}" if tail else ""))
        self.log = log
        self.tail = tail
        self.cause = cause


def root_cause(log_text: str) -> str:
    """The most specific error line of a log tail (the first ``XxxError: ...``, which is usually the root cause
    that later lines re-raise), without the logger's prefix."""
    import re

    for line in log_text.splitlines():
        m = re.search(r"\b([A-Z][A-Za-z]*(?:Error|Exception)): (.+)$", line)
        if m and "hit an exception" not in line:
            return f"{m.group(1)}: {m.group(2).strip()}"[:400]
    return ""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def listening_addresses(port: int) -> list[str]:
    """Addresses that sockets in LISTEN state are bound to on ``port`` (from /proc/net/tcp and tcp6)."""
    out: list[str] = []
    for table, v6 in (("/proc/net/tcp", False), ("/proc/net/tcp6", True)):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            parts = line.split()
            if len(parts) < 4 or parts[3] != "0A":  # 0A = LISTEN
                continue
            addr, _, hexport = parts[1].rpartition(":")
            if int(hexport, 16) != port:
                continue
            raw = bytes.fromhex(addr)
            if v6:
                # four little-endian 32-bit words
                raw = b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))
                import ipaddress

                out.append(str(ipaddress.IPv6Address(raw)))
            else:
                out.append(".".join(str(b) for b in raw[::-1]))
    return out


def _is_loopback(addr: str) -> bool:
    import ipaddress

    ip = ipaddress.ip_address(addr)
    mapped = getattr(ip, "ipv4_mapped", None)
    return (mapped or ip).is_loopback


def log_tail(path: Path, lines: int = 40, max_bytes: int = 64_000) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            data = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    return "\n".join(data.splitlines()[-lines:])


_LIVE: "weakref.WeakSet[EngineServer]" = weakref.WeakSet()
_LIVE_LOCK = threading.Lock()


def _stop_all_at_exit() -> None:
    with _LIVE_LOCK:
        servers = list(_LIVE)
    for s in servers:
        s.stop()


atexit.register(_stop_all_at_exit)


def live_servers() -> list["EngineServer"]:
    """Servers of this process that are still running (the plugin checks this at the end of the session)."""
    with _LIVE_LOCK:
        return [s for s in _LIVE if s.running]


@dataclass
class LaunchRecord:
    """What one launch was: command, where its log is, how long it took to start and to stop."""

    argv: list[str]
    port: int
    log: Path
    started_s: float = 0.0  # wall time until healthy
    stopped_s: Optional[float] = None
    server_pid: Optional[int] = None
    exit: Optional[str] = None
    attempts: int = 1
    notes: list[str] = field(default_factory=list)
    #: the host's 1-minute load average when the launch started and when it stopped (the machine is shared:
    #: provenance says how busy it was)
    load_at_start: Optional[float] = None
    load_at_stop: Optional[float] = None

    def to_json(self) -> dict:
        return {"argv": self.argv, "port": self.port, "log": str(self.log), "ready_s": round(self.started_s, 3),
                "stop_s": None if self.stopped_s is None else round(self.stopped_s, 3), "pid": self.server_pid,
                "exit": self.exit, "attempts": self.attempts, "notes": self.notes,
                "loadavg_1m": [self.load_at_start, self.load_at_stop]}


class EngineServer:
    """One server process tree. ``argv_for_port(port)`` builds the command for a port; ``health_path`` must
    answer 200 once the server can take requests."""

    def __init__(self, argv_for_port: Callable[[int], Sequence[str]], *, env: dict[str, str], log: Path,
                 health_path: str = "/health", launch_timeout_s: float = 300.0, stop_grace_s: float = 10.0,
                 cwd: Optional[Path] = None, port_attempts: int = 3) -> None:
        self._argv_for_port = argv_for_port
        self.env = env
        self.log = Path(log)
        self.health_path = health_path
        self.launch_timeout_s = launch_timeout_s
        self.stop_grace_s = stop_grace_s
        self.cwd = cwd
        self.port_attempts = port_attempts
        self.port = 0
        self.record: Optional[LaunchRecord] = None
        self._sup: Optional[subprocess.Popen] = None
        self._server_pid: Optional[int] = None
        self._stopped = False

    # ------------------------------------------------------------------------------------------ lifecycle
    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def running(self) -> bool:
        return self._sup is not None and not self._stopped

    @property
    def server_pid(self) -> Optional[int]:
        return self._server_pid

    def __enter__(self) -> "EngineServer":
        if self._sup is None:
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> "EngineServer":
        self.log.parent.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        last_error: Optional[EngineLaunchError] = None
        for attempt in range(1, self.port_attempts + 1):
            self.port = free_port()
            argv = [str(a) for a in self._argv_for_port(self.port)]
            self.record = LaunchRecord(argv=argv, port=self.port, log=self.log, attempts=attempt,
                                       load_at_start=_load())
            with open(self.log, "ab") as f:
                f.write(f"\n=== pytest-autotune: launch attempt {attempt}: {' '.join(argv)}\n".encode())
            try:
                self._spawn(argv)
                self._wait_healthy(t0)
                self._check_loopback_only()
                self.record.started_s = time.perf_counter() - t0
                return self
            except EngineLaunchError as e:
                self.stop()
                last_error = e
                # another process took the port between our probe and the server's bind: try another one
                if "address already in use" not in e.tail.lower() or attempt == self.port_attempts:
                    raise
                self._stopped = False
        assert last_error is not None
        raise last_error

    def _spawn(self, argv: list[str]) -> None:
        spec = {"argv": argv, "env": self.env, "cwd": str(self.cwd) if self.cwd else None, "log": str(self.log),
                "grace_s": self.stop_grace_s}
        # the supervisor gets its own session: Ctrl-C in the terminal reaches pytest only, which then stops
        # the server in order; the supervisor learns of pytest's death on its own
        self._sup = subprocess.Popen([sys.executable, "-m", "pytest_autotune.engines.supervisor"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     start_new_session=True, env=_supervisor_env(), close_fds=True)
        with _LIVE_LOCK:
            _LIVE.add(self)
        assert self._sup.stdin is not None
        self._sup.stdin.write((json.dumps(spec) + "\n").encode())
        self._sup.stdin.flush()
        msg = self._read_message(30.0)
        if msg is None or "started" not in msg:
            err = (msg or {}).get("error", "the supervisor did not answer")
            raise EngineLaunchError(f"could not start {argv[0]}: {err}", self.log, log_tail(self.log))
        self._server_pid = int(msg["started"])
        assert self.record is not None
        self.record.server_pid = self._server_pid

    def _read_message(self, timeout_s: float) -> Optional[dict]:
        assert self._sup is not None and self._sup.stdout is not None
        fd = self._sup.stdout.fileno()
        ready, _, _ = select.select([fd], [], [], timeout_s)
        if not ready:
            return None
        line = self._sup.stdout.readline()
        if not line:
            return None
        try:
            return json.loads(line)
        except ValueError:
            return None

    def _server_exited(self) -> Optional[dict]:
        """The supervisor's report that the server exited by itself, if it made one."""
        assert self._sup is not None and self._sup.stdout is not None
        ready, _, _ = select.select([self._sup.stdout.fileno()], [], [], 0)
        if ready:
            return self._read_message(0.1) or {"exited": None}
        if self._sup.poll() is not None:
            return {"exited": None, "by": "supervisor died"}
        return None

    def _wait_healthy(self, t0: float) -> None:
        deadline = t0 + self.launch_timeout_s
        url = self.base_url + self.health_path
        with localhttp.client(timeout=5.0) as c:
            while True:
                gone = self._server_exited()
                if gone is not None:
                    raise EngineLaunchError(
                        f"the server exited during start-up (exit status {gone.get('exited')}); see its log",
                        self.log, log_tail(self.log))
                try:
                    if c.get(url).status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                if time.perf_counter() > deadline:
                    raise EngineLaunchError(
                        f"no healthy answer from {url} within {self.launch_timeout_s:g} s "
                        "([engines].launch_timeout_s); the server is stopped", self.log, log_tail(self.log))
                # a server up in well under a second (llama.cpp, the tests' fake) is seen at once; a slow
                # starter (vLLM: ~40 s) is not polled more than 4 times a second
                time.sleep(0.05 if time.perf_counter() - t0 < 2.0 else 0.25)

    def _check_loopback_only(self) -> None:
        """Servers bind 127.0.0.1 only (docs/guide/engines.md#stopping-servers): a server reachable from the network
        is stopped, whatever flag or environment variable made it listen elsewhere."""
        exposed = [a for a in listening_addresses(self.port) if not _is_loopback(a)]
        if exposed:
            raise EngineLaunchError(f"the server listens on {', '.join(exposed)}:{self.port}, not only on 127.0.0.1; "
                                    "engine servers must not be reachable from the network (remove the flag or "
                                    "variable that changes the bind address)", self.log, "")

    def stop(self) -> None:
        """Stop the whole tree (idempotent). Waits for the supervisor, which waits for every process."""
        if self._sup is None or self._stopped:
            return
        self._stopped = True
        t0 = time.perf_counter()
        sup = self._sup
        try:
            if sup.stdin is not None and not sup.stdin.closed:
                try:
                    sup.stdin.write(b"stop\n")
                    sup.stdin.flush()
                    sup.stdin.close()
                except (BrokenPipeError, OSError):
                    pass
            try:
                sup.wait(timeout=self.stop_grace_s + 20.0)
            except subprocess.TimeoutExpired:
                sup.kill()
                sup.wait(timeout=10.0)
        finally:
            # last resort, should the supervisor have failed: the server's own process group
            if self._server_pid is not None:
                try:
                    os.killpg(self._server_pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            if sup.stdout is not None:
                sup.stdout.close()
            with _LIVE_LOCK:
                _LIVE.discard(self)
            if self.record is not None:
                self.record.stopped_s = time.perf_counter() - t0
                self.record.load_at_stop = _load()
            with open(self.log, "ab") as f:
                f.write(f"=== pytest-autotune: stopped in {time.perf_counter() - t0:.2f} s\n".encode())


def _load() -> Optional[float]:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def _supervisor_env() -> dict[str, str]:
    """The supervisor must import this package the way pytest did (an editable or a plain install)."""
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "PYTHONPATH")}
    here = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = here + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env
