"""What a sample is, chosen from the calibration's reports: how many calls (``k``: long enough for the device's
``min_sample_s``, at most ``max_calls_per_sample``, within the device's free memory) and, on a device with modes,
eager calls or a CUDA graph. Pure functions of the sandboxes' replies, used by :mod:`.schedule`."""

from __future__ import annotations

import math
from typing import Any, Optional

from ..protocol import TimingPlan

#: share of the smaller free device memory the timed calls' sets may take
MEMORY_SHARE = 0.7
#: sets (one call's inputs and output) held per call of a sample, in both sandboxes together: eager, each sandbox
#: holds its round's two input groups and their kept outputs (2 each); graphs add each group's static copies (4
#: each). 6 for every mode with half the free memory (the first cap) held the suite's larger problems to 3-13 calls,
#: 1.7-1.9 ms samples below the 3 ms that protocol 4 asks for, and moved their ratios ~0.6-1.2% towards 1 against
#: triton's do_bench (docs/results/h200.md). A 4 us call at k = 498 in graph mode ran a sandbox out of memory.
SETS_PER_CALL = {"eager": 4, "graphs": 8}


def memory_cap(replies: dict[str, dict], graphs: bool = False, groups: int = 2) -> Optional[int]:
    """The largest ``k`` whose input sets and outputs fit the device's free memory (``None``: not budgeted). A call's
    size is the baseline's (``A``) where it reported one: the candidate's outputs have its shapes (the correctness
    gate saw to that), and what the candidate says about itself must not choose ``k``. ``groups``: input groups a
    sandbox holds at once (1 in half-rounds: measure/memory.py)."""
    mem = [r.get("memory") or {} for r in replies.values()]
    free = [f for f in (m.get("free_bytes") for m in mem) if isinstance(f, int)]
    if not mem or len(free) < len(mem):
        return None
    base = (replies.get("A") or {}).get("memory") or {}
    sets = SETS_PER_CALL["graphs" if graphs else "eager"] * groups // 2
    per_call = sets * int(base.get("set_bytes") or max(int(m.get("set_bytes") or 0) for m in mem))
    return max(1, int(MEMORY_SHARE * min(free) // per_call)) if per_call > 0 else None


def choose_calls_per_sample(per_call_s: float, plan: TimingPlan, cap: Optional[int] = None) -> int:
    k = math.ceil(plan.min_sample_s / max(per_call_s, 1e-9))
    return int(min(max(k, 1), plan.max_calls_per_sample, cap or plan.max_calls_per_sample))


def decide_timing_mode(infos: dict[str, dict], graph_below_s: float) -> dict[str, Any]:
    """CUDA graphs for both arms, or eager for both, from both sandboxes' calibration reports."""
    fastest = [i.get("fastest_graph_call_s") for i in infos.values()]
    failures = [f for i in infos.values() for f in (i.get("capture_failures") or [])]
    if not any("fastest_graph_call_s" in i or "capture_failures" in i for i in infos.values()):
        return {}  # this device has no modes
    if graph_below_s <= 0:
        return {"graphs": False, "reason": "graphs off (graph_below_s = 0)"}
    if failures:
        return {"graphs": False, "reason": f"eager: a calibration call could not be captured ({failures[0]})"}
    known = [f for f in fastest if f is not None]
    if len(known) < len(fastest) or not known:
        return {"graphs": False, "reason": "eager: no calibration call was short enough to try a graph"}
    if min(known) < graph_below_s:
        return {"graphs": True,
                "reason": f"graph: fastest calibration call {min(known) * 1e6:.2f} us < {graph_below_s * 1e6:g} us"}
    return {"graphs": False,
            "reason": f"eager: fastest calibration call {min(known) * 1e6:.2f} us >= {graph_below_s * 1e6:g} us"}


__all__ = ["choose_calls_per_sample", "decide_timing_mode", "memory_cap", "MEMORY_SHARE", "SETS_PER_CALL"]
