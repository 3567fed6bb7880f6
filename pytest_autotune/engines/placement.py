"""Keep the load generator off the CPUs an engine pinned its workers to (docs/guide/engines.md#where-the-load-generator-runs).

vLLM's CPU build binds its model worker to cores (``VLLM_CPU_OMP_THREADS_BIND=auto``: on 2 cores, the worker on
CPU 0 and CPU 1 "reserved" for everything else). The load generator runs in this process, unpinned, and the
scheduler may leave it on the worker's core for a whole window: the worker then gets a share of its only core.
Measured on this project's 2-core machine, 2-3 of the default's 8 windows ran at 13-17 req/s instead of ~40, p50
latency x3, and those windows reversed the sign of a 2x effect (docs/guide/engines.md). The engine's own threads are the
engine's business and are left where it put them; only the harness's thread moves, for the windows only.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Optional

from .supervisor import descendants


def parse_cpu_list(text: str) -> frozenset[int]:
    """``"0-2,5"`` -> {0, 1, 2, 5} (the kernel's list format, /proc/<pid>/status Cpus_allowed_list)."""
    out: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return frozenset(out)


def _allowed(pid: int, tid: str) -> Optional[frozenset[int]]:
    try:
        with open(f"/proc/{pid}/task/{tid}/status") as f:
            for line in f:
                if line.startswith("Cpus_allowed_list:"):
                    return parse_cpu_list(line.split(":", 1)[1])
    except (OSError, ValueError):
        return None
    return None


def pinned_cpus(root: int, available: frozenset[int]) -> frozenset[int]:
    """The CPUs that threads of ``root``'s process tree are confined to, counting only threads whose allowed set
    is narrower than ``available`` (a thread allowed everywhere pins nothing)."""
    pinned: set[int] = set()
    for pid in [root, *descendants(root)]:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            allowed = _allowed(pid, tid)
            if allowed is not None and allowed & available and not available <= allowed:
                pinned.update(allowed & available)
    return frozenset(pinned)


@contextmanager
def load_generator_placed(server_root: Optional[int]) -> Iterator[Optional[str]]:
    """Run the body with this thread (and the threads it starts) off the CPUs the server pinned; yields a note for
    the launch record, or None when nothing moved (no pinning, no free CPU left, or no affinity API)."""
    if server_root is None or not hasattr(os, "sched_setaffinity"):
        yield None
        return
    mine = frozenset(os.sched_getaffinity(0))
    pinned = pinned_cpus(server_root, mine)
    away = mine - pinned
    if not pinned or not away:
        yield None
        return
    # pid 0 is the calling thread on Linux: the controller's other threads keep their CPUs
    os.sched_setaffinity(0, away)
    try:
        yield (f"load generator on CPU(s) {_fmt(away)}, off the engine's pinned CPU(s) {_fmt(pinned)}")
    finally:
        os.sched_setaffinity(0, mine)


def _fmt(cpus: frozenset[int]) -> str:
    return ",".join(str(c) for c in sorted(cpus))
