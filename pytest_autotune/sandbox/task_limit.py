"""A bound on a sandbox's tasks (processes and threads) that holds for uid 0, where no cgroup ``pids`` controller
is there (docs/design/threat-model.md#the-jail: limits).

Why: on CUDA the sandbox keeps the controller's uid (CUDA IPC needs it; a user namespace breaks CUDA), which is root
on the GPU host; root's ``RLIMIT_NPROC`` binds nothing there (the kernel exempts the initial user namespace's root
user, capabilities or not), and that host's cgroup v2 has no ``pids`` controller. So the sandbox installs, after
``no_new_privs`` and its deny filter, a second seccomp filter of a few instructions (:func:`install`) that hands
every ``clone``/``fork``/``vfork`` -- every new task, thread or process -- to a *supervisor* through a seccomp
user-notification listener; ``clone3`` answers ``ENOSYS`` (glibc then uses ``clone``) and other architectures'
calls kill the process. The sandbox passes the listener to the zygote and closes its own copy before any candidate
code runs; the zygote passes it to the controller, whose :class:`TaskLimiter` thread answers each request: let it
go on (``SECCOMP_USER_NOTIF_FLAG_CONTINUE``) while the sandbox's tasks -- counted from the host's ``/proc``, its
whole tree, which in its pid namespace is every process it ever started (:mod:`.members`) -- stay below
``[sandbox].max_processes``, else refuse it with ``EAGAIN``, as ``pids.max`` would. The bound binds: the kernel
does not create the task until the controller answered. A candidate cannot take the listener (it never sees it),
nor add one of its own (the kernel refuses a second listener in one filter chain), nor undo the filter.

Costs: each new task waits for one round trip to the controller (tens of microseconds); nothing is asked while
no task is created, i.e. never during an honest timed call. Needs Linux >= 5.5 (the CONTINUE flag) on x86-64 or
arm64; :func:`unavailable` says why not elsewhere, and the plan then falls back to the controller's watchdog
(:func:`..sandbox.runner.Sandbox`), which only *detects* and kills.
"""

from __future__ import annotations

import ctypes
import errno
import os
import select
import struct
import sys
import threading
import time
from typing import Optional

from . import members

SECCOMP_SET_MODE_FILTER = 1
SECCOMP_FILTER_FLAG_NEW_LISTENER = 1 << 3
RET_KILL_PROCESS = 0x80000000
RET_ERRNO = 0x00050000
RET_USER_NOTIF = 0x7FC00000
RET_ALLOW = 0x7FFF0000
FLAG_CONTINUE = 1
X32 = 0x40000000
#: machine -> (AUDIT_ARCH, seccomp's number, calls that create a task, clone3's number)
ARCHES = {
    "x86_64": (0xC000003E, 317, (56, 57, 58, X32 | 56, X32 | 57, X32 | 58), (435, X32 | 435)),
    "aarch64": (0xC00000B7, 277, (220,), (435,)),
}
NOTIF_RECV = 0xC0502100  # SECCOMP_IOCTL_NOTIF_RECV: _IOWR('!', 0, struct seccomp_notif), 80 bytes
NOTIF_SEND = 0xC0182101  # SECCOMP_IOCTL_NOTIF_SEND: _IOWR('!', 1, struct seccomp_notif_resp), 24 bytes
#: an approval counts as a task not yet visible in /proc until its requester asks again, or this long
PENDING_S = 0.05

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.ioctl.argtypes = (ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p)


class TaskLimitUnavailable(RuntimeError):
    pass


def unavailable() -> str:
    """Why this machine cannot have the bound ("" when it can)."""
    if not sys.platform.startswith("linux"):
        return f"seccomp user notification is Linux only (this is {sys.platform})"
    if os.uname().machine not in ARCHES:
        return f"no task filter for {os.uname().machine} (x86_64 and aarch64 only)"
    try:
        with open("/proc/sys/kernel/seccomp/actions_avail") as f:
            if "user_notif" not in f.read().split():
                return "the kernel has no seccomp user notification (Linux >= 5.0)"
    except OSError as e:
        return f"cannot read the kernel's seccomp actions ({e})"
    rel = os.uname().release.split(".")
    try:
        if (int(rel[0]), int(rel[1].split("-")[0])) < (5, 5):
            return f"Linux {os.uname().release} lacks SECCOMP_USER_NOTIF_FLAG_CONTINUE (5.5)"
    except (ValueError, IndexError):
        pass
    return ""


def program() -> bytes:
    """The filter: other architectures killed, clone3 -> ENOSYS, task creation -> the supervisor, the rest allowed."""
    arch, _, creating, clone3 = ARCHES[os.uname().machine]
    ins: list[tuple[int, int, int, int]] = [(0x20, 0, 0, 4), (0x15, 1, 0, arch), (0x06, 0, 0, RET_KILL_PROCESS),
                                            (0x20, 0, 0, 0)]
    checks = [(nr, "enosys") for nr in clone3] + [(nr, "notify") for nr in creating]
    n = len(checks)
    # after the checks: [n] ALLOW, [n+1] ENOSYS, [n+2] NOTIFY
    for i, (nr, what) in enumerate(checks):
        target = n + (1 if what == "enosys" else 2)
        ins.append((0x15, target - i - 1, 0, nr))
    ins += [(0x06, 0, 0, RET_ALLOW), (0x06, 0, 0, RET_ERRNO | errno.ENOSYS), (0x06, 0, 0, RET_USER_NOTIF)]
    return b"".join(struct.pack("=HBBI", *i) for i in ins)


def install() -> int:
    """In the sandbox, after no_new_privs (and before anything else runs): load the filter; return the listener."""
    why = unavailable()
    if why:
        raise TaskLimitUnavailable(why)
    code = program()
    buf = ctypes.create_string_buffer(code, len(code))

    class Prog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    prog = Prog(len(code) // 8, ctypes.cast(buf, ctypes.c_void_p))
    nr = ARCHES[os.uname().machine][1]
    fd = _libc.syscall(nr, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER, ctypes.byref(prog))
    if fd < 0:
        e = ctypes.get_errno()
        raise TaskLimitUnavailable(f"seccomp(NEW_LISTENER): {os.strerror(e)}")
    return int(fd)


class _Box:
    def __init__(self, pid: int, limit: int) -> None:
        self.pid = pid
        self.limit = limit
        self.pending: dict[int, float] = {}  # requester tid -> when its clone was let go on
        self.allowed = 0
        self.refused = 0
        self.peak = 0


class TaskLimiter:
    """The controller's supervisor: one thread answers every sandbox's requests for a new task."""

    def __init__(self) -> None:
        self._boxes: dict[int, _Box] = {}
        self._drop: list[int] = []
        self._lock = threading.Lock()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)
        self._thread: Optional[threading.Thread] = None
        self.broken = ""

    def add(self, fd: int, pid: int, limit: int) -> None:
        """Answer ``fd``'s requests for the sandbox whose main process is ``pid`` (host pid namespace)."""
        with self._lock:
            self._boxes[fd] = _Box(pid, limit)
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name="autotune-task-limit", daemon=True)
                self._thread.start()
        self._wake()

    def remove(self, fd: int) -> dict:
        """Stop serving ``fd`` (the thread closes it: a request still pending then fails with ENOSYS)."""
        with self._lock:
            box = self._boxes.pop(fd, None)
            if box is None:  # not ours, or removed already: its number may name another file by now
                return {}
            self._drop.append(fd)
        self._wake()
        return {"allowed": box.allowed, "refused": box.refused, "peak_tasks": box.peak}

    def _wake(self) -> None:
        try:
            os.write(self._wake_w, b"w")
        except BlockingIOError:  # the thread has a wake-up pending already
            pass

    def close(self) -> None:
        """Stop serving every listener left (the pool is closing: its sandboxes are gone or going)."""
        with self._lock:
            left = list(self._boxes)
        for fd in left:
            self.remove(fd)

    def stats(self, fd: int) -> dict:
        box = self._boxes.get(fd)
        return {} if box is None else {"allowed": box.allowed, "refused": box.refused, "peak_tasks": box.peak}

    def _serve(self) -> None:
        poller = select.poll()
        poller.register(self._wake_r, select.POLLIN)
        polled: set[int] = set()
        hung: set[int] = set()  # no task uses the filter any more: nothing to poll until remove() closes it
        while True:
            with self._lock:
                drop, self._drop = self._drop, []
                for fd in drop:
                    if fd in polled:
                        poller.unregister(fd)
                        polled.discard(fd)
                    hung.discard(fd)
                    os.close(fd)
                for fd in self._boxes:
                    if fd not in polled and fd not in hung:
                        poller.register(fd, select.POLLIN)
                        polled.add(fd)
            for fd, ev in poller.poll():
                if fd == self._wake_r:
                    os.read(self._wake_r, 64)
                elif ev & select.POLLIN:
                    self._answer(fd)
                elif ev & (select.POLLHUP | select.POLLERR | select.POLLNVAL):
                    poller.unregister(fd)  # the sandbox is gone; remove() closes the fd
                    polled.discard(fd)
                    hung.add(fd)

    def _answer(self, fd: int) -> None:
        req = ctypes.create_string_buffer(80)
        if _libc.ioctl(fd, NOTIF_RECV, req) < 0:
            return  # ENOENT: the task died before we read it
        nid, tid = struct.unpack_from("=QI", req.raw, 0)
        box = self._boxes.get(fd)
        allow = box is not None and self._within(box, tid)
        resp = ctypes.create_string_buffer(struct.pack("=QqiI", nid, 0, 0 if allow else -errno.EAGAIN,
                                                       FLAG_CONTINUE if allow else 0), 24)
        if _libc.ioctl(fd, NOTIF_SEND, resp) < 0 and ctypes.get_errno() == errno.EINVAL and allow:
            # a kernel without the CONTINUE flag: refuse rather than leave the task waiting forever
            self.broken = "the kernel refused SECCOMP_USER_NOTIF_FLAG_CONTINUE"
            _libc.ioctl(fd, NOTIF_SEND, ctypes.create_string_buffer(struct.pack("=QqiI", nid, 0, -errno.ENOSYS, 0),
                                                                   24))

    @staticmethod
    def _within(box: _Box, tid: int) -> bool:
        """Below the bound with one more task? Counted from /proc, plus the tasks approved whose clone may not have
        happened yet: a clone returns to its caller only once the new task exists, so a requester's earlier approval
        is done when it asks again; others count for PENDING_S (several tasks cloning at once)."""
        now = time.monotonic()
        box.pending.pop(tid, None)
        for t in [t for t, at in box.pending.items() if now - at > PENDING_S]:
            del box.pending[t]
        count = members.tasks(box.pid) + len(box.pending)
        box.peak = max(box.peak, count)
        if count + 1 > box.limit:
            box.refused += 1
            return False
        box.pending[tid] = now
        box.allowed += 1
        return True


__all__ = ["TaskLimiter", "TaskLimitUnavailable", "install", "unavailable", "program"]
