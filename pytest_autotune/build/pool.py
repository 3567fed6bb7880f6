"""The build pool (docs/guide/compiled-candidates.md, "Builds in parallel"): a session's compiled candidates are
built side by side, before its first item runs -- so before its first timed sample, and never during one -- each
in a jailed build sandbox of its own with ``[build]``'s budget, exactly as an item would build it (:mod:`.builder`).

**How wide.** ``width`` builds at once, ``jobs`` compilers each (``MAX_JOBS``, which torch's ``cpp_extension``
hands to ninja), so that ``width x jobs`` never exceeds this process's share of the cores:

* ``cores``: the CPUs this process may run on (its affinity), fewer where its cgroup's ``cpu.max`` says so;
  an xdist worker's share is ``cores // workers`` (each worker runs a pool of its own);
* ``memory``: each build sandbox may hold up to ``[build].memory_mb`` with every compiler it starts (its cgroup's
  limit), so no more than ``0.9 x MemAvailable / memory_mb`` builds run at once (divided among xdist workers too):
  the pool can never push the host into swapping or the OOM killer, whatever the builds do within their limits;
* ``width = min(builds, cores share, memory width)`` (``--autotune-build-workers=N`` sets it; 0 turns the pool off),
  and ``jobs = max(1, cores share // width)``: a few builds on many cores each get several compilers, many builds
  one each.

**Devices.** Each build is asked in two steps: the candidate's import and ``ModelNew`` (where its compilers run)
side by side, then its one call on the problem's inputs -- the call that triggers lazy builds and Triton's
autotuning -- one at a time on a device whose memory the builds share (CUDA: KernelBench's inputs take up to 16 GB
a set), side by side on the CPU (each call within its own sandbox's memory limit).

**Apart.** Builds run side by side only where each build sandbox has a private /tmp and a pid namespace of its own
(the jail's view): elsewhere a candidate's build could reach the objects of one built beside it, so the pool builds
one at a time (:func:`apart`).

**Several processes.** xdist workers each collect every item, so each runs a pool over all the selected builds;
each starts at a different place in the list, takes a key's lock (build/shared.py) before building it, and skips a
key another process is building, coming back to it once its own list is done (it then waits for that lock and
reads the entry the other left). No key is built twice at once, and every pool ends only when every selected key
is built, so no worker times anything while another still builds.
"""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from .builder import Builder, BuildJob, BuildResult

#: the share of MemAvailable the pool's builds may take at their limits together
MEMORY_SHARE = 0.9


@dataclass(frozen=True)
class PoolPlan:
    width: int  # builds at once
    jobs: int  # each build's compilers at once (MAX_JOBS)
    cores: int  # this process's share of the cores
    memory_width: int  # builds the host memory holds at [build].memory_mb each (this process's share)
    workers: int  # pools on the host (xdist workers)
    why: str

    def to_json(self) -> dict:
        return asdict(self)


def host_cores() -> int:
    """CPUs this process may use: its affinity, bounded by its cgroup's ``cpu.max`` quota where there is one."""
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    quota = _cgroup_cpu_quota()
    return max(1, min(n, quota) if quota else n)


def _cgroup_cpu_quota() -> Optional[int]:
    try:
        rel = next((ln.split("::", 1)[1].strip() for ln in Path("/proc/self/cgroup").read_text().splitlines()
                    if ln.startswith("0::")), "")
        for folder in (Path("/sys/fs/cgroup") / rel.lstrip("/"), Path("/sys/fs/cgroup")):
            f = folder / "cpu.max"
            if f.is_file():
                quota, period = f.read_text().split()[:2]
                return None if quota == "max" else max(1, -(-int(quota) // int(period)))
    except (OSError, ValueError, StopIteration):
        pass
    return None


def available_memory() -> Optional[int]:
    """MemAvailable from /proc/meminfo, in bytes; None where it cannot be read."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def plan_pool(builds: int, cores: int, available: Optional[int], memory_mb: int, workers: int = 1,
              override: Optional[int] = None) -> PoolPlan:
    """The pool's width and each build's compilers (the module's docstring says why these)."""
    workers = max(1, workers)
    share = max(1, cores // workers)
    mem_width = max(1, int(MEMORY_SHARE * available) // (memory_mb << 20) // workers) if available else share
    if override:
        width = max(1, min(override, builds))
        why = f"--autotune-build-workers={override}"
    else:
        width = max(1, min(builds, share, mem_width))
        limit = "builds" if width == builds else "cores" if width == share else "memory"
        why = (f"min({builds} builds, {share} cores{'' if workers == 1 else f' of {cores} over {workers} workers'}, "
               f"{mem_width} x [build].memory_mb={memory_mb} in {MEMORY_SHARE:g} x MemAvailable): set by {limit}")
    return PoolPlan(width, max(1, share // width), share, mem_width, workers, why)


def one_at_a_time(plan: PoolPlan, why: str) -> PoolPlan:
    """The plan narrowed to one build at a time, with every core for its compilers."""
    return PoolPlan(1, plan.cores, plan.cores, plan.memory_width, plan.workers, why)


def apart(jail: Any) -> bool:
    """Whether build sandboxes running at once cannot reach each other: each has a private /tmp (its scratch folder,
    its objects before they are sent) and a pid namespace of its own. Where the jail gives less, the pool builds one
    at a time (two candidates' builds side by side could then overwrite each other's objects)."""
    return bool(getattr(jail, "view", False)) and "pid" in tuple(getattr(jail, "namespaces", ()))


def run_pool(builder: Builder, jobs: list[BuildJob], plan: PoolPlan, device_shared: bool,
             progress: Optional[Callable[[BuildResult], None]] = None) -> dict[str, BuildResult]:
    """Every job's build, keyed by its key. ``device_shared``: the builds' one call each holds a lock (a GPU's memory
    is the builds' to share). The order of ``jobs`` is the order builds start in."""
    t0 = time.perf_counter()
    call_lock = threading.Lock() if device_shared else None
    results: dict[str, BuildResult] = {}
    pool_json = plan.to_json()

    def one(job: BuildJob, block: bool) -> tuple[BuildJob, Optional[BuildResult]]:
        started = time.perf_counter() - t0
        r = builder.obtain(job, block=block, built_by="pool", keep_bytes=False, max_jobs=plan.jobs, staged=True,
                           call_lock=call_lock)
        if r is not None:
            r.queued_s, r.pool = started, pool_json
            if progress is not None:
                progress(r)
        return job, r

    with ThreadPoolExecutor(max_workers=plan.width, thread_name_prefix="autotune-build") as ex:
        try:
            later = []
            for job, r in ex.map(lambda j: one(j, False), jobs):
                if r is None:
                    later.append(job)  # another process holds its lock: it is building it
                else:
                    results[job.key] = r
            for job, r in ex.map(lambda j: one(j, True), later):
                assert r is not None
                results[job.key] = r
        except BaseException:  # an interrupt: the builds running now end with their sandboxes
            ex.shutdown(wait=False, cancel_futures=True)
            builder.kill_running()
            raise
    return results


def spread(jobs: list[BuildJob], worker: int, workers: int) -> list[BuildJob]:
    """The jobs in the order worker ``worker`` of ``workers`` starts them: each at its own place in the list, so that
    xdist workers start on different keys instead of queueing on the same locks."""
    if workers <= 1 or not jobs:
        return list(jobs)
    at = (worker % workers) * len(jobs) // workers
    return jobs[at:] + jobs[:at]
