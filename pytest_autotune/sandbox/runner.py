"""Controller side of the sandbox: start isolated processes, talk to them, enforce timeout and memory limit.

:class:`SandboxPool` owns one zygote per controller/worker process (Linux) or spawns a fresh interpreter per
sandbox elsewhere. :class:`Sandbox` is one isolated process running one candidate; every request goes through
:meth:`Sandbox.request`, which turns a crash, hang or memory blow-up into a :class:`SandboxFailure`.

The pool decides the jail once (:attr:`SandboxPool.plan`, :mod:`.jail`): the zygote enters it and every sandbox
completes it before it reads its candidate; the pool puts each sandbox into a cgroup of its own right after the
fork (:mod:`.cgroups`) and removes it with the sandbox. The processes as the controller holds them (the
zygote's client, a handle per sandbox, the kinds of failure) are in :mod:`.processes`.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any, Optional

from . import linux
from .cgroups import CgroupSession, CgroupUnavailable, SandboxCgroup
from .environment import sandbox_env
from .jail_plan import ENV_EMULATE, SUPERVISED, WATCHDOG, JailPlan, Missing, emulating_gpu_host, plan_jail
from .members import tasks
from .processes import (
    Handle,
    PopenHandle,
    SandboxFailure,
    Zygote,
    ZygoteHandle,
    alive,
    describe_status,
    package_root,
    rss_bytes,
    tail,
)
from .task_limit import TaskLimiter
from .wire import Channel, PeerGone, WireError, WireTimeout

# SandboxFailure is imported from here by the flow, the gates and the schedule
__all__ = ["Sandbox", "SandboxFailure", "SandboxPool"]


class SandboxPool:
    """Starts sandboxes. ``mode``: "zygote" (fork from a pre-warmed clean process; Linux) or "spawn"."""

    def __init__(self, threads: int, timeout_s: float, memory_mb: int, start_timeout_s: float,
                 mode: Optional[str] = None, env_extra: Optional[dict[str, str]] = None,
                 isolation: str = "off", hide: tuple[str, ...] = (), max_processes: int = 256,
                 device: str = "cpu") -> None:
        self.threads = threads
        self.timeout_s = timeout_s
        self.memory_bytes = memory_mb << 20
        self.start_timeout_s = start_timeout_s
        self.mode = mode or ("zygote" if sys.platform.startswith("linux") else "spawn")
        self.env_extra = dict(env_extra or {})
        self.workdir = Path(tempfile.mkdtemp(prefix="autotune-sandbox-"))
        self.isolation = isolation
        self.hide = tuple(hide)
        self.max_processes = max_processes
        self.device = device
        self.cgroups: Optional[CgroupSession] = None
        #: the controller's supervisor of every sandbox's new tasks, where the plan bounds them so (:mod:`.task_limit`)
        self.limiter: Optional[TaskLimiter] = None
        self._plan: Optional[JailPlan] = None
        self._zygote: Optional[Zygote] = None
        #: pid -> (label, Sandbox) of the sandboxes started, open or closed, until the device's memory of a closed
        #: one is known to be back (memory_holders.settle prunes them)
        self.started: dict[int, tuple[str, Any]] = {}
        self._count = 0
        #: starts one sandbox at a time (the zygote, the count, the cgroups); the build pool starts from threads
        self._starting = threading.Lock()

    @property
    def watch_tasks(self) -> bool:
        """Count every sandbox's tasks while waiting for it and kill it past the bound: where nothing binds them."""
        return self._plan is not None and WATCHDOG in self._plan.limits

    @property
    def plan(self) -> JailPlan:
        """The jail every sandbox of this pool runs in, decided on first use (docs/design/threat-model.md)."""
        if self._plan is None:
            self._plan = self._decide_plan()
        return self._plan

    def _decide_plan(self) -> JailPlan:
        if self.isolation == "off":
            return JailPlan(isolation="off", device=self.device)
        if self.mode != "zygote":
            return JailPlan(isolation=self.isolation, device=self.device, missing=(Missing(
                "everything", f"sandboxes are spawned, not forked from a zygote ({sys.platform})",
                "measure on Linux"),))
        cg_kind, cg_error = None, ""
        try:
            if emulating_gpu_host():
                raise CgroupUnavailable(f"none: {ENV_EMULATE}=gpu-host plans as the GPU host gets it")
            self.cgroups = CgroupSession.open(self.memory_bytes, self.max_processes)
            cg_kind = self.cgroups.kind
        except (CgroupUnavailable, OSError) as e:
            cg_error = str(e)
        plan = plan_jail(self.isolation, self.device, self.hide, self.memory_bytes, self.max_processes,
                         cgroups_ok=cg_kind, cgroup_error=cg_error)
        if not plan.limits.startswith("cgroup") and self.cgroups is not None:
            self.cgroups.close()
            self.cgroups = None
        if SUPERVISED in plan.limits:
            self.limiter = TaskLimiter()
        if plan.identity in ("same-uid", "userns"):
            # the sandbox shares the controller's uid: no /proc/<controller>/mem, no ptrace, even if it could
            # name this process (its pid namespace already hides it)
            try:
                linux.set_dumpable(False)
            except OSError:
                pass
        return plan

    def _get_zygote(self) -> Zygote:
        if self._zygote is None or not self._zygote.alive():
            if self._zygote is not None:
                self._zygote.close()
            self._zygote = Zygote(self.threads, self.workdir, self.start_timeout_s, self.env_extra, self.plan)
        return self._zygote

    def prestart(self) -> None:
        """Launch the zygote without waiting for it (the session does when collection ends): it imports torch and
        enters its jail while the controller prepares the first item; the first :meth:`start` waits for it. Measured
        (8b208d0): 0.5-1.6 s less per one-item session (docs/results/test-suite.md)."""
        if self.mode == "zygote" and self._zygote is None:
            self._zygote = Zygote(self.threads, self.workdir, self.start_timeout_s, self.env_extra, self.plan,
                                  wait=False)

    def start(self, init: dict[str, Any], label: str = "sandbox", memory_mb: Optional[int] = None,
              max_processes: Optional[int] = None, limits_key: str = "[sandbox]") -> "Sandbox":
        """A sandbox running ``init``'s arm. ``memory_mb``, ``max_processes``: limits of its own instead of the pool's
        (the build sandbox's, from ``[build]``: ``limits_key`` names them in its errors), where a cgroup or the task
        supervisor bounds it; the RSS watchdog applies them to its main process everywhere."""
        memory_bytes = (memory_mb << 20) if memory_mb else self.memory_bytes
        max_processes = max_processes or self.max_processes
        if not self.plan.view:  # no private /tmp: compiled code's scratch folders go where close() removes them
            init = {**init, "scratch": str(self.workdir)}
        with self._starting:
            self._count += 1
            log = self.workdir / f"{self._count:04d}-{_safe(label)}.log"
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        group: Optional[SandboxCgroup] = None
        self._starting.acquire()
        try:
            if self.mode == "zygote":
                z = self._get_zygote()
                pid, zpid, listener = z.fork(theirs.fileno(), log)
                handle: Handle = ZygoteHandle(pid, z, zpid)
                if listener is not None and self.limiter is not None:
                    self.limiter.add(listener, pid, max_processes)
                    handle.listener = listener
                elif listener is not None:  # nobody to answer it: the sandbox's new tasks fail with ENOSYS
                    os.close(listener)
                if self.cgroups is not None:
                    # before the sandbox reads its first command: every process it starts is counted and limited
                    try:
                        group = self.cgroups.create(memory_bytes, max_processes)
                        group.add(pid)
                    except OSError as e:
                        handle.kill()
                        handle.status(5.0)
                        if group is not None:
                            group.remove()
                        ours.close()
                        raise SandboxFailure("start", f"could not put the sandbox into its cgroup: {e}") from None
            else:
                env = sandbox_env(self.threads, self.env_extra)
                env["PYTHONPATH"] = os.pathsep.join([package_root()] + [p for p in sys.path if p])
                with open(log, "wb") as lf:
                    proc = subprocess.Popen(
                        [sys.executable, "-m", "pytest_autotune.sandbox.child", str(theirs.fileno())],
                        pass_fds=[theirs.fileno()], env=env, cwd=str(self.workdir), stdin=subprocess.DEVNULL,
                        stdout=lf, stderr=subprocess.STDOUT, start_new_session=True,
                    )
                handle = PopenHandle(proc)
        finally:
            theirs.close()
            self._starting.release()
        box = Sandbox(Channel(ours), handle, log, self, group, memory_bytes=memory_bytes, max_processes=max_processes,
                      limits_key=limits_key)
        self.started[handle.pid] = (label, box)
        box.hello = box.request(init, timeout=self.start_timeout_s + self.timeout_s, phase="load")
        return box

    @property
    def zygote_pid(self) -> Optional[int]:
        """The zygote's pid (it must hold no device context: memory_holders names it if it does)."""
        return self._zygote.proc.pid if self._zygote is not None else None

    def drop_unused_zygote(self) -> None:
        """The zygote goes if no sandbox was started from it (a session with no kernel item to run); the pool, its
        jail plan and its cgroups stay, and a later :meth:`start` launches a new zygote."""
        if self._zygote is not None and self._count == 0:
            self._zygote.close()
            self._zygote = None

    def close(self) -> None:
        if self._zygote is not None:
            self._zygote.close()
            self._zygote = None
        if self.cgroups is not None:
            self.cgroups.close()
            self.cgroups = None
        if self.limiter is not None:
            self.limiter.close()
        for scratch in self.workdir.glob("autotune-buil*"):  # compiled code's folders (sandbox/child_build.py)
            shutil.rmtree(scratch, ignore_errors=True)
        _drop_empty_logs(self.workdir)


def _drop_empty_logs(workdir: Path) -> None:
    """The pool's folder of logs goes when nothing was written there (every session left one in the temp directory
    before: 1912 of them on the development machine). A log with something in it -- what a candidate printed, a
    crash's traceback -- stays, and with it the folder."""
    try:
        for log in workdir.iterdir():
            if log.is_file() and log.stat().st_size == 0:
                log.unlink()
        workdir.rmdir()
    except OSError:
        pass


def _safe(s: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in s)[:80]


class Sandbox:
    """One isolated process. Use as a context manager; :meth:`close` always kills and reaps it."""

    def __init__(self, chan: Channel, handle: Handle, log: Path, pool: SandboxPool,
                 cgroup: Optional[SandboxCgroup] = None, memory_bytes: Optional[int] = None,
                 max_processes: Optional[int] = None, limits_key: str = "[sandbox]") -> None:
        self.chan = chan
        self.memory_bytes = memory_bytes or pool.memory_bytes
        self.max_processes: int = max_processes or int(getattr(pool, "max_processes", 0) or 0)
        self.limits_key = limits_key
        self.handle = handle
        self.log = log
        self.pool = pool
        self.cgroup = cgroup
        self.hello: dict = {}
        self.peak_rss = 0
        self.closed = False

    @property
    def pid(self) -> int:
        return self.handle.pid

    def task_limit(self) -> dict:
        """The task supervisor's counts for this sandbox (allowed, refused, peak tasks); {} without one."""
        fd = getattr(self.handle, "listener", None)
        return self.pool.limiter.stats(fd) if fd is not None and self.pool.limiter is not None else {}

    def other_processes(self) -> Optional[int]:
        """Live processes of this sandbox besides its main one -- every descendant, ``setsid`` or not -- counted
        from its cgroup by the controller; None without a cgroup (then count its process group instead)."""
        if self.cgroup is None:
            return None
        return sum(1 for p in self.cgroup.procs() if p != self.handle.pid and alive(p))

    def descendants_cpu_ns(self) -> Optional[int]:
        """CPU time of every process this sandbox ever ran (exited ones included), from its cgroup."""
        return self.cgroup.cpu_ns() if self.cgroup is not None else None

    def _crash(self, phase: str) -> SandboxFailure:
        st = self.handle.status(2.0)
        if self.cgroup is not None and self.cgroup.oom_killed():
            return SandboxFailure(
                "memory", f"the sandbox went over the protocol's limit of {self.memory_bytes / 2**20:.0f} MiB "
                f"({self.limits_key}.memory_mb, its cgroup's memory limit) during {phase} and the kernel killed it",
                tail(self.log))
        return SandboxFailure("crash", f"the sandbox died during {phase} ({describe_status(st)})", tail(self.log))

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _watchdog(self) -> None:
        if self.pool.watch_tasks:
            n = tasks(self.handle.pid)
            if n > self.max_processes:
                self.handle.kill()
                raise SandboxFailure(
                    "processes", f"the sandbox ran {n} processes and threads, over the protocol's "
                    f"{self.max_processes} ({self.limits_key}.max_processes); it was killed (the controller's watchdog: "
                    "nothing on this machine bounds a sandbox's tasks, docs/design/threat-model.md)", tail(self.log))
        rss = rss_bytes(self.handle.pid)
        self.peak_rss = max(self.peak_rss, rss)
        if rss > self.memory_bytes:
            self.handle.kill()
            raise SandboxFailure(
                "memory",
                f"sandbox used {rss / 2**20:.0f} MiB, over the protocol's limit of "
                f"{self.memory_bytes / 2**20:.0f} MiB ({self.limits_key}.memory_mb); it was killed",
                tail(self.log),
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
            raise self._crash(f"before {phase or msg.get('cmd')}") from None

    def receive(self, timeout: Optional[float] = None, phase: str = "") -> dict[str, Any]:
        timeout = self.pool.timeout_s if timeout is None else timeout
        phase = phase or "a request"
        try:
            reply = self.chan.recv(timeout=timeout, watchdog=self._watchdog)
        except WireTimeout:
            self.handle.kill()
            if self.cgroup is not None and self.cgroup.limit_reached():
                # the memory limit, not the clock, is what stopped it: at its cgroup's limit the kernel reclaims
                # the sandbox's own pages and it crawls until the timeout (seen on a VM whose fresh pages fault
                # slowly: 1.5 GB took over 6 s)
                raise SandboxFailure(
                    "memory", f"no answer within {timeout:.0f} s during {phase}, with the sandbox at the protocol's "
                    f"limit of {self.memory_bytes / 2**20:.0f} MiB ({self.limits_key}.memory_mb, its cgroup's memory "
                    "limit); it was killed", tail(self.log)) from None
            raise SandboxFailure(
                "timeout", f"no answer within {timeout:.0f} s during {phase} "
                f"({self.limits_key}.timeout_s); the sandbox was killed", tail(self.log)) from None
        except PeerGone:
            raise self._crash(phase) from None
        except WireError as e:
            self.handle.kill()
            raise SandboxFailure("protocol", f"the sandbox sent an invalid message: {e}", tail(self.log)) from None
        if not isinstance(reply, dict):
            self.handle.kill()
            raise SandboxFailure("protocol", "the sandbox sent a non-object reply", tail(self.log))
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
        if self.cgroup is not None:  # and everything else it started (setsid or not), then its cgroup
            self.cgroup.kill()
            self.cgroup.remove()
        fd = getattr(self.handle, "listener", None)
        if fd is not None and self.pool.limiter is not None:
            self.pool.limiter.remove(fd)
            self.handle.listener = None
