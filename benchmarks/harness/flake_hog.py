"""A CPU hog of known load for the flake hunt (benchmarks/harness/flake_hunt.py): ``procs`` busy processes, each
busy for ``duty`` of every ``period_s`` and asleep for the rest, on the CPUs given (or wherever the scheduler puts
them).

The hog always stops: ``Hog`` is a context manager whose exit (a normal end, an exception, Ctrl-C) terminates its
processes, kills any that outlive ``STOP_GRACE_S`` and waits for them; and each hog process checks its parent once a
period and leaves by itself when the parent is gone (a hunter killed with SIGKILL, whose ``finally`` never runs).

What it did is measured, not assumed: ``Hog.cpu_seconds`` reads each process's user and system time from
``/proc/<pid>/stat`` (the last reading before it stopped is kept), so a report can give the load it achieved beside
the load it asked for.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Optional

#: seconds a hog process gets to leave after SIGTERM before it is killed
STOP_GRACE_S = 5.0

#: the hog process: stdlib only, started with ``python -S -c`` so that it is running in milliseconds. argv: duty,
#: period, the parent's pid, the CPUs ("" for any). It says "ready" once it has its CPUs, then loops.
CHILD = r"""
import os, sys, time
duty, period, parent, cpus = float(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
if cpus:
    os.sched_setaffinity(0, {int(c) for c in cpus.split(",")})
sys.stdout.write("ready\n")
sys.stdout.flush()
busy = duty * period
while os.getppid() == parent:
    start = time.perf_counter()
    x = 0
    while time.perf_counter() - start < busy:
        for _ in range(1000):
            x += 1
    rest = period - (time.perf_counter() - start)
    if rest > 0:
        time.sleep(rest)
"""


def _clock_ticks() -> int:
    return os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def process_cpu_seconds(pid: int) -> Optional[float]:
    """User + system CPU seconds of a live process from ``/proc/<pid>/stat`` (None: gone, or no /proc)."""
    try:
        text = open(f"/proc/{pid}/stat").read()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()
    # fields[0] is the state (field 3 of proc(5)); utime and stime are fields 14 and 15
    return (int(fields[11]) + int(fields[12])) / _clock_ticks()


@dataclass
class Hog:
    """``procs`` busy processes at ``duty`` (0-1] of every ``period_s``, pinned to ``cpus`` where given."""

    procs: int = 1
    duty: float = 1.0
    cpus: Optional[list[int]] = None
    period_s: float = 0.1
    _children: list[subprocess.Popen] = field(default_factory=list, repr=False)
    _cpu: dict[int, float] = field(default_factory=dict, repr=False)
    _started: Optional[float] = field(default=None, repr=False)
    _stopped: Optional[float] = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.procs < 0:
            raise ValueError(f"--hog={self.procs}: give 0 (no hog) or more busy processes")
        if not 0.0 < self.duty <= 1.0:
            raise ValueError(f"--hog-duty={self.duty}: give a share of each period in (0, 1], e.g. 0.9")
        if self.cpus is not None and not set(self.cpus) <= set(os.sched_getaffinity(0)):
            raise ValueError(f"--hog-cpus={self.cpus}: this process may use CPUs {sorted(os.sched_getaffinity(0))}")

    def describe(self) -> dict:
        """What was asked for, for a report."""
        return {"procs": self.procs, "duty": self.duty, "cpus": self.cpus, "period_s": self.period_s}

    @property
    def pids(self) -> list[int]:
        return [c.pid for c in self._children]

    def start(self) -> "Hog":
        if self._children:
            raise RuntimeError("the hog is already running: stop it first")
        cpus = ",".join(str(c) for c in self.cpus) if self.cpus else ""
        self._cpu = {}
        # the wall clock starts before the first process does: its CPU is never counted against less wall time
        self._started = time.monotonic()
        self._stopped = None
        try:
            for _ in range(self.procs):
                child = subprocess.Popen(
                    [sys.executable, "-S", "-c", CHILD, str(self.duty), str(self.period_s), str(os.getpid()), cpus],
                    stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True)
                self._children.append(child)
                assert child.stdout is not None
                if child.stdout.readline().strip() != "ready":
                    raise RuntimeError(f"a hog process did not start (exit {child.poll()})")
        except BaseException:
            self.stop()
            raise
        return self

    def cpu_seconds(self) -> float:
        """CPU seconds the hog's processes used so far (a stopped process's last reading is kept)."""
        for child in self._children:
            seconds = process_cpu_seconds(child.pid)
            if seconds is not None and child.poll() is None:
                self._cpu[child.pid] = seconds
        return sum(self._cpu.values())

    def running(self) -> list[int]:
        """pids of the hog's processes that are still alive."""
        return [c.pid for c in self._children if c.poll() is None]

    def stop(self) -> None:
        """Terminate every hog process, kill those that outlive the grace, wait for all. Safe to call twice."""
        self.cpu_seconds()
        for child in self._children:
            if child.poll() is None:
                child.terminate()
        deadline = time.monotonic() + STOP_GRACE_S
        for child in self._children:
            try:
                child.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
            if child.stdout is not None:
                child.stdout.close()
        if self._children and self._stopped is None:
            self._stopped = time.monotonic()
        self._children = []

    def achieved(self) -> dict:
        """The load it gave: CPU seconds, wall seconds, and CPU over (wall x procs) as the duty achieved."""
        wall = ((self._stopped or time.monotonic()) - self._started) if self._started is not None else 0.0
        cpu = self.cpu_seconds()
        share = cpu / (wall * self.procs) if wall > 0 and self.procs else 0.0
        return {"cpu_s": round(cpu, 2), "wall_s": round(wall, 3), "duty_achieved": round(share, 3)}

    def __enter__(self) -> "Hog":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


__all__ = ["Hog", "process_cpu_seconds", "CHILD", "STOP_GRACE_S"]
