"""The controller's watch for work of the candidate outside its own calls, in processes: every process of the
candidate's sandbox besides its main one, and every process the GPU driver lists (docs/design/threat-model.md#the-catalog).

The schedule (:mod:`.schedule`) calls :meth:`HelperWatch.before_sample` before every sample of either arm (the same
work before both, so neither arm's sample follows more controller work than the other's) and
:meth:`HelperWatch.after_round` after every round. Before a sample: the candidate's process tree (its main
process's ``children``: a few files, ~0.1 ms; a helper on the GPU is a process, so this sees it too). After a round:
every process of the candidate's pid namespace from one pass over ``/proc`` (its process group and descendants
where it has no namespace of its own, its cgroup's members where it has one; :mod:`..sandbox.members`) and the
driver's per-process SM utilisation since the last round. A helper seen at any check counts for that round; the
thread gate refuses the item naming each one (pid, name, own session or not, its GPU context and memory, SM use).

A process on the GPU that belongs to neither sandbox nor to the controller is *reported* (``others``), not refused:
it may be another user's job; with the jail's pid namespace a candidate's helper cannot be such a process.
"""

from __future__ import annotations

import os
import time
from typing import Any, Optional

from ..sandbox import members as M
from .gpu_processes import GpuProcessSource, open_nvml

#: helpers described in the report at most (a fork bomb's count is still exact)
MAX_DESCRIBED = 8


class HelperWatch:
    """``candidate``/``baseline``: :class:`~pytest_autotune.sandbox.runner.Sandbox` (pid, cgroup, pool.device).
    ``gpu``: the driver's view; by default NVML where the pool times on CUDA."""

    def __init__(self, candidate: Any, baseline: Any, gpu: Optional[GpuProcessSource] = None,
                 gpu_why: str = "") -> None:
        self.cand = candidate
        self.base = baseline
        self.ours = {os.getpid(), int(candidate.pid), int(baseline.pid)}
        self.cand_ns = M.pid_namespace(candidate.pid) if M.leads_namespace(candidate.pid) else None
        self.how = "pid namespace" if self.cand_ns else "process group and descendants"
        on_gpu = getattr(getattr(candidate, "pool", None), "device", "cpu") == "cuda"
        if gpu is None and on_gpu:
            gpu, gpu_why = open_nvml()
        self.gpu = gpu
        self.gpu_why = gpu_why if on_gpu or gpu is not None else "not a GPU item"
        self.gpu_pids_ok: Optional[bool] = None
        self.seen: dict[int, dict] = {}
        self.others: dict[int, dict] = {}
        self.round_pids: set[int] = set()
        self.rounds_with_helpers = 0
        self.checks = 0
        self.check_s = 0.0
        self._label = "during warm-up"

    # ------------------------------------------------------------------------------------------- checks
    def before_sample(self, arm: str) -> None:
        t0 = time.perf_counter()
        self.checks += 1
        self._label = f"before a {'baseline' if arm == 'A' else 'candidate'} sample"
        for p in M.tree(self.cand.pid)[1:]:
            if M.info(p) is not None:  # a zombie waits for its parent to read its status: it runs nothing
                self._helper(p, self._label)
        self.check_s += time.perf_counter() - t0

    def after_round(self) -> int:
        """Helpers of the candidate seen during this round (any check); the next round starts afresh."""
        t0 = time.perf_counter()
        cg = self.cand.cgroup.procs() if getattr(self.cand, "cgroup", None) is not None else None
        found, self.how = M.members(self.cand.pid, cg)
        for p in found:
            if p != self.cand.pid:
                self._helper(p, "after a round")
        self._gpu_check()
        n = len(self.round_pids)
        self.rounds_with_helpers += 1 if n else 0
        self.round_pids = set()
        self.check_s += time.perf_counter() - t0
        return n

    def _helper(self, pid: int, when: str) -> dict:
        self.round_pids.add(pid)
        rec = self.seen.get(pid)
        if rec is None:
            rec = self.seen[pid] = {**M.describe(pid, self.cand.pid), "first_seen": when, "times_seen": 0}
        rec["times_seen"] += 1
        return rec

    def _belongs_to_candidate(self, pid: int) -> bool:
        if pid in self.seen:
            return True
        if self.cand_ns is not None and M.pid_namespace(pid) == self.cand_ns:
            return True
        q, hops = pid, 0
        while q > 1 and hops < 4096:  # its ancestors (a nested namespace, or no namespace at all)
            if q == self.cand.pid:
                return True
            inf = M.info(q)
            if inf is None:
                return False
            q, hops = inf.ppid, hops + 1
        return False

    def _gpu_check(self) -> None:
        if self.gpu is None:
            return
        running = self.gpu.running()
        if self.gpu_pids_ok is None and running:
            # NVML speaks of pids of the initial pid namespace: trust them only if it names the controller by its own
            self.gpu_pids_ok = os.getpid() in running
        if self.gpu_pids_ok is False:
            return
        busy = self.gpu.busy_since_last()
        for pid in set(running) | set(busy):
            if pid in self.ours:
                continue
            dev, mem = running.get(pid, (None, None))
            if self._belongs_to_candidate(pid):
                rec = self._helper(pid, "after a round")
                rec["gpu"] = {"device": dev, "bytes": mem, "sm_util_max": max(busy.get(pid, 0),
                                                                             rec.get("gpu", {}).get("sm_util_max", 0))}
            elif pid not in self.others and M.info(pid) is not None:  # gone: the driver had not torn it down yet
                self.others[pid] = {**M.describe(pid), "device": dev, "bytes": mem, "sm_util_max": busy.get(pid)}

    # ------------------------------------------------------------------------------------------- results
    def report(self) -> dict:
        helpers = sorted(self.seen.values(), key=lambda r: r["pid"])
        limit = self.cand.task_limit() if hasattr(self.cand, "task_limit") else {}
        return {"found_by": self.how, "task_limit": limit, "helpers": len(helpers), "described": helpers[:MAX_DESCRIBED],
                "rounds_with_helpers": self.rounds_with_helpers, "checks": self.checks,
                "check_s": round(self.check_s, 6),
                "gpu": ("nvml" if self.gpu is not None else f"not watched: {self.gpu_why}")
                + ("" if self.gpu_pids_ok is not False else " (its pids are not this pid namespace's: not used)"),
                "others_on_gpu": sorted(self.others.values(), key=lambda r: r["pid"])[:MAX_DESCRIBED]}


def describe_helpers(report: dict) -> str:
    """The refusal's words for what was seen: 'pid 412 "python3" (own session, CUDA context on GPU 0: 512 MiB,
    SM up to 97%), ...'."""
    parts = []
    for h in report.get("described", []):
        bits = []
        if h.get("own_session"):
            bits.append("a session of its own")
        g = h.get("gpu")
        if g:
            mem = f": {g['bytes'] / 2**20:.0f} MiB" if isinstance(g.get("bytes"), int) else ""
            sm = f", SM use up to {g['sm_util_max']}%" if g.get("sm_util_max") else ""
            bits.append(f"a CUDA context on GPU {g.get('device')}{mem}{sm}")
        bits.append(f"first seen {h.get('first_seen')}")
        parts.append(f"pid {h['pid']} {h.get('comm', '?')!r} ({', '.join(bits)})")
    more = report.get("helpers", 0) - len(parts)
    return ", ".join(parts) + (f" and {more} more" if more > 0 else "")


__all__ = ["HelperWatch", "describe_helpers", "MAX_DESCRIBED"]
