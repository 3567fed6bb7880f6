"""What the controller reads about a sandbox from the kernel itself (Linux), so the sandbox cannot forge it:
its CPU clocks, and the other live processes of its process group.

:class:`CpuWatch` attributes every CPU nanosecond of the item's sandboxes to "busy" (the controller had a request
outstanding with that sandbox) or "idle" (it had none: the sandbox should be blocked reading its socket). A
candidate that works between its own calls -- a thread, a signal handler, a helper computing ahead while the
baseline is timed -- shows up as idle CPU (docs/architecture.md#no-candidate-code-outside-its-calls).
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from typing import Optional


def cpu_clocks(pid: int) -> Optional[tuple[int, int, int]]:
    """(process CPU ns, main-thread CPU ns, main-thread run-queue wait ns) of another process, or ``None`` where the
    OS has no such clocks. The process clock is the one glibc's ``clock_getcpuclockid`` names (CPUCLOCK_SCHED:
    every thread, exited ones included); the main thread's (its tid is the pid) CPU time and the time it spent
    runnable but waiting for a CPU (preempted) come from ``/proc/PID/task/PID/schedstat``, since the kernel serves
    per-thread clocks only to the thread's own process."""
    if not sys.platform.startswith("linux") or pid <= 0:
        return None
    try:
        process = time.clock_gettime_ns(((~pid) << 3) | 2)
        with open(f"/proc/{pid}/task/{pid}/schedstat", "rb") as f:
            fields = f.read().split()
        main_thread, waited = int(fields[0]), int(fields[1])
    except (OSError, OverflowError, ValueError, IndexError):
        return None
    return process, main_thread, waited


def main_thread_on_cpu(pid: int) -> Optional[bool]:
    """Whether ``pid``'s main thread is running or runnable; ``None`` where the OS does not say.

    Asked first of ``/proc/PID/task/PID/syscall``: the kernel answers it with the blocked thread's system call only
    once the thread is entirely off its CPU (``wait_task_inactive``: its last context switch, which brings its CPU
    clocks up to date, is over), and with ``running`` otherwise. The thread's state letter (``stat``, the fallback
    where that file is unreadable) turns from ``R`` to ``S`` a few instructions *before* that switch: read in
    between, the clocks still lack the CPU since the last tick."""
    if not sys.platform.startswith("linux") or pid <= 0:
        return None
    try:
        with open(f"/proc/{pid}/task/{pid}/syscall", "rb") as f:
            return f.read().split(b" ", 1)[0].strip() == b"running"
    except OSError:  # not ptrace-readable by the controller, or no such file: the state letter
        pass
    try:
        with open(f"/proc/{pid}/task/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    return stat[stat.rfind(b")") + 2:stat.rfind(b")") + 3] == b"R"


#: how long :meth:`CpuWatch.end` waits for a sandbox that answered to block on its socket again (it has a few Python
#: lines left to run after its answer: tens of microseconds, more when it is preempted). 5 ms until 2026-12-03: a
#: fresh clone's CI run refused an honest clamp for 2 x 5.65 ms of idle CPU after two answers whose reads had not
#: settled in 5 ms. Waiting longer costs a candidate nothing it could use: its CPU after its answer is booked as idle
#: however long the wait (:meth:`CpuWatch.end`, "after its answer")
SETTLE_LIMIT_S = 0.05


def wait_off_cpu(pid: int, limit_s: float = SETTLE_LIMIT_S) -> bool:
    """Wait (yielding the CPU) until ``pid``'s main thread is no longer running or runnable, at most ``limit_s``;
    whether it got there.

    Why: the kernel adds a running thread's CPU time to its clocks only at a scheduler tick or when it leaves the
    CPU. Read from another process, the clocks of a thread still running lag by up to a tick (4 ms at HZ=250:
    measured here, the process clock of a busy process advances in steps of a median 3.99 ms). A sandbox that has
    just answered is still on its CPU for a few lines; read then, up to a tick of its request's CPU was booked to
    the time after it -- the idle CPU the idle rule compares, which refused an honest candidate for 10.08 ms of
    "idle" CPU of which ~0.2 ms was real. A thread that left the CPU has its clocks brought up to date."""
    deadline = time.perf_counter() + limit_s
    while True:
        running = main_thread_on_cpu(pid)
        if not running:
            return True
        if time.perf_counter() >= deadline:
            return False
        os.sched_yield()


def group_helpers(pid: int) -> int:
    """Processes other than ``pid`` itself in ``pid``'s process group (Linux; 0 elsewhere), counted from /proc: a
    candidate that forks helpers to run beside the measurement is seen here, whatever it reports."""
    if not sys.platform.startswith("linux") or pid <= 0:
        return 0
    n = 0
    try:
        entries = os.listdir("/proc")
    except OSError:
        return 0
    for e in entries:
        if not e.isdigit() or int(e) == pid:
            continue
        try:
            with open(f"/proc/{e}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2:].split()
        if len(fields) > 2 and fields[0] != b"Z" and int(fields[2]) == pid:  # state, ppid, pgrp
            n += 1
    return n


@dataclass
class CpuAccount:
    busy_s: float = 0.0
    idle_s: float = 0.0
    #: idle CPU seen during each of the other arm's samples (the candidate must be asleep then)
    during_other_samples_s: float = 0.0
    #: the most idle CPU of one interval between two checkpoints (a one-off event, e.g. the kernel's own work
    #: charged to the process, lands in one interval; work deferred out of every call lands in many)
    idle_max_s: float = 0.0
    readable: bool = True
    #: answers after which the sandbox's main thread was still running or runnable when its clocks were read
    #: (SETTLE_LIMIT_S passed first). Mostly a preempted thread, whose clocks are exact; a thread still running
    #: after its answer for that long has up to a tick of its CPU shown as idle
    unsettled_reads: int = 0
    #: the IDLE_TOP largest idle intervals, largest first: {"s", "main_thread_s", "after"} (the request whose answer
    #: opened the interval). Diagnosis of an idle refusal: on the main thread after a request, the harness's or the
    #: candidate's own work went on after the answer; on other threads, a runtime's or the candidate's threads
    idle_top: list = field(default_factory=list)
    #: CPU of the main thread after its answers, before the controller's read (the main thread's CPU of a request
    #: beyond the request's wall time, which one thread cannot exceed): booked idle, with the interval that follows
    after_answer_s: float = 0.0
    after_answer_max_s: float = 0.0


IDLE_TOP = 3


@dataclass
class CpuWatch:
    """CPU of each named sandbox, split into busy and idle by the controller's own requests."""

    pids: dict[str, int]
    accounts: dict[str, CpuAccount] = field(default_factory=dict)
    _last: dict[str, Optional[tuple[int, int, int]]] = field(default_factory=dict)
    _busy: dict[str, bool] = field(default_factory=dict)
    _since: dict[str, Optional[tuple[int, int, int]]] = field(default_factory=dict)
    _label: dict[str, str] = field(default_factory=dict)
    _after: dict[str, str] = field(default_factory=dict)
    #: wall clock (perf_counter_ns) at each open request's begin, read before its clocks
    _since_wall: dict[str, int] = field(default_factory=dict)
    #: the main thread's CPU ns after the last answer (all of it the process's too), to be shown with the idle
    #: interval that follows it
    _carry: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name, pid in self.pids.items():
            self.accounts[name] = CpuAccount()
            # the first reading, like every other, once the sandbox left its CPU (wait_off_cpu): read while it
            # still ran the lines after its last answer, the lag was booked as idle CPU "after start"
            wait_off_cpu(pid)
            self._last[name] = cpu_clocks(pid)
            self._busy[name] = False
            if self._last[name] is None:
                self.accounts[name].readable = False

    def checkpoint(self, sampling: Optional[str] = None) -> dict[str, Optional[tuple[int, ...]]]:
        """Read every sandbox's clocks and attribute the CPU since the last checkpoint. ``sampling``: the sandbox
        whose sample just ended (idle CPU of the others is then also counted as during-the-other-sample)."""
        deltas: dict[str, Optional[tuple[int, ...]]] = {}
        for name, pid in self.pids.items():
            now, last = cpu_clocks(pid), self._last[name]
            acct = self.accounts[name]
            if now is None or last is None:
                acct.readable = False
                deltas[name] = None
                self._last[name] = now
                continue
            d = tuple(x - y for x, y in zip(now, last))
            deltas[name] = d
            if self._busy[name]:
                acct.busy_s += d[0] * 1e-9
            else:
                acct.idle_s += d[0] * 1e-9
                if sampling is not None and sampling != name:
                    acct.during_other_samples_s += d[0] * 1e-9
                # the interval, with the CPU after the answer that opened it (already in idle_s: CpuWatch.end)
                carried = self._carry.pop(name, 0)
                s_ns, main_ns = d[0] + carried, d[1] + carried
                acct.idle_max_s = max(acct.idle_max_s, s_ns * 1e-9)
                if s_ns > 0 and (len(acct.idle_top) < IDLE_TOP or s_ns * 1e-9 > acct.idle_top[-1]["s"]):
                    acct.idle_top.append({"s": s_ns * 1e-9, "main_thread_s": main_ns * 1e-9,
                                          "after_answer_s": carried * 1e-9,
                                          "after": self._after.get(name, "start")})
                    acct.idle_top.sort(key=lambda e: -e["s"])
                    del acct.idle_top[IDLE_TOP:]
            self._last[name] = now
        return deltas

    def begin(self, *names: str, label: str = "") -> None:
        """``label``: what the request is (kept with the idle interval that follows its answer)."""
        wall = time.perf_counter_ns()  # before the clocks: the request's wall time is never short of its CPU
        self.checkpoint()
        for n in names:
            self._busy[n] = True
            self._since[n] = self._last[n]
            self._since_wall[n] = wall
            self._label[n] = label

    def end(self, name: str, sampling: Optional[str] = None,
            answered_ns: Optional[int] = None) -> Optional[tuple[int, ...]]:
        """Close ``name``'s request; returns (process CPU, main-thread CPU, main-thread run-queue wait) ns since
        :meth:`begin`. The sandbox has answered (``answered_ns``: when its answer was in, perf_counter_ns; now if not
        given): its clocks are read once it has left the CPU (:func:`wait_off_cpu`).

        Its main thread's CPU beyond the request's wall time (begin to answer) ran after the answer, while the
        controller waited for it to block: one thread cannot use more CPU than the wall time it had. That part is
        booked as idle CPU, not the request's, so a wait of any length leaves no window for work after an answer
        (a timer's signal handler precomputing the next call while the controller waits; tests/test_procstat.py)."""
        answered = time.perf_counter_ns() if answered_ns is None else answered_ns
        if not wait_off_cpu(self.pids[name]):
            self.accounts[name].unsettled_reads += 1
        self.checkpoint(sampling)
        self._busy[name] = False
        self._after[name] = self._label.pop(name, "")
        start, now = self._since.pop(name, None), self._last[name]
        wall = answered - self._since_wall.pop(name, answered)
        if start is None or now is None:
            return None
        delta = [x - y for x, y in zip(now, start)]
        # less a thousandth of the wall time: the thread's clock (the scheduler's) and the wall clock (CLOCK_MONOTONIC,
        # which NTP may slew by up to 500 ppm) are not one clock; over a busy request of seconds they may part by ~1 ms
        beyond = delta[1] - wall - wall // 1000
        if beyond > 0:
            acct = self.accounts[name]
            acct.busy_s -= beyond * 1e-9
            acct.idle_s += beyond * 1e-9
            acct.after_answer_s += beyond * 1e-9
            acct.after_answer_max_s = max(acct.after_answer_max_s, beyond * 1e-9)
            self._carry[name] = beyond
            delta[0] -= beyond
            delta[1] -= beyond
        return tuple(delta)


__all__ = ["cpu_clocks", "main_thread_on_cpu", "wait_off_cpu", "group_helpers", "CpuWatch", "CpuAccount"]
