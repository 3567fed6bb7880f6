"""What a sample is, chosen from the calibration's reports: how many calls (``k``: long enough for the device's
``min_sample_s``, at most ``max_calls_per_sample``, within the device's free memory) and, on a device with modes,
eager calls or a CUDA graph. Pure functions of the sandboxes' replies, used by :mod:`.schedule`."""

from __future__ import annotations

import math
from dataclasses import dataclass
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
    gate saw to that), and what the candidate says about itself must not choose ``k``; the schedule passes the
    baseline's reply alone. ``groups``: input groups a sandbox holds at once (1 in half-rounds: measure/memory.py)."""
    mem = [r.get("memory") or {} for r in replies.values()]
    free = [f for f in (m.get("free_bytes") for m in mem) if isinstance(f, int)]
    if not mem or len(free) < len(mem):
        return None
    base = (replies.get("A") or {}).get("memory") or {}
    sets = SETS_PER_CALL["graphs" if graphs else "eager"] * groups // 2
    per_call = sets * int(base.get("set_bytes") or max(int(m.get("set_bytes") or 0) for m in mem))
    return max(1, int(MEMORY_SHARE * min(free) // per_call)) if per_call > 0 else None


#: share of a sandbox's memory limit ([sandbox].memory_mb) the timed calls' sets may take where the device's memory
#: is the sandbox's own (the CPU): a round holds both groups' inputs and outputs, and the heap the placement writes
#: beyond them (measure/devices/placement.py) and the calls' temporaries come on top. At protocol 9's floor of 8 calls
#: a sample, kb36_RMSNorm_'s 268 MB tensors took a sandbox past its 8 GiB limit without this bound.
HOST_MEMORY_SHARE = 0.25


def host_memory_cap(reply: dict, limit_bytes: int, groups: int = 2) -> Optional[int]:
    """The largest ``k`` whose sets fit ``HOST_MEMORY_SHARE`` of a sandbox's memory limit, where the device reports
    no free memory of its own (its tensors live in the sandbox's memory); ``None`` elsewhere. ``reply``: the
    baseline's calibration reply."""
    mem = reply.get("memory") or {}
    if mem.get("free_bytes") is not None or limit_bytes <= 0:
        return None
    per_call = groups * int(mem.get("set_bytes") or 0)
    return max(1, int(HOST_MEMORY_SHARE * limit_bytes // per_call)) if per_call > 0 else None


def choose_calls_per_sample(per_call_s: float, plan: TimingPlan, cap: Optional[int] = None) -> int:
    """``k``: enough calls of the baseline's per-call time for ``plan.sample_target_s`` -- ``min_sample_s``, and
    since protocol 10 on CUDA enough that an arm ``[breaker].max_speedup`` times faster still holds
    ``fast_arm_sample_s``, so the sample's length does not depend on which arm is faster and neither arm's fixed
    cost a sample weighs more than ~1% of it (docs/design/protocol.md, "The sample's length") -- at least
    ``min_calls_per_sample`` (a sample's first call is its only cold one: with few calls its share of the sample
    would move the ratio with ``k``), at most ``max_calls_per_sample`` and the memory bound ``cap``."""
    k = max(math.ceil(plan.sample_target_s / max(per_call_s, 1e-9)), plan.min_calls_per_sample)
    return int(min(max(k, 1), plan.max_calls_per_sample, cap or plan.max_calls_per_sample))


def sample_length(k: int, per_call_s: float, plan: TimingPlan, cap: Optional[int]) -> dict:
    """What the chosen ``k`` gives, for the report (``details.timing.calibration.sample``): the baseline's sample,
    the sample of an arm ``max_speedup`` times faster, the target, and what held ``k`` below it where something did
    (the memory bound or ``max_calls_per_sample``): then the faster arm's fixed cost a sample weighs more."""
    out: dict[str, Any] = {"target_s": plan.sample_target_s, "baseline_s": k * per_call_s}
    if plan.max_speedup > 0 and plan.fast_arm_sample_s > 0:
        out["fastest_arm_s"] = k * per_call_s / plan.max_speedup
        out["fast_arm_floor_s"] = plan.fast_arm_sample_s
    if k * per_call_s < plan.sample_target_s * 0.999:  # k = ceil(target / call) unless a bound held it
        out["short_by"] = ("the memory bound" if cap is not None and k >= cap and cap < plan.max_calls_per_sample
                           else "max_calls_per_sample")
    return out


def k_disagrees(k: int, per_call_s: float, plan: TimingPlan, cap: Optional[int]) -> bool:
    """Would the baseline's per-call time ``per_call_s`` (from timed samples) choose a ``k`` more than
    ``plan.k_recheck_ratio`` times larger or smaller than the ``k`` in use? (0: never re-checked.)"""
    if plan.k_recheck_ratio <= 0:
        return False
    other = choose_calls_per_sample(per_call_s, plan, cap)
    return max(other, k) > plan.k_recheck_ratio * min(other, k)


@dataclass(frozen=True)
class KOverride:
    """``--autotune-k``: calls per sample fixed by the user instead of chosen by the protocol (harness benchmarks:
    benchmarks/harness/k_invariance.py; rows recorded with it are exploratory). ``calls``: that many; ``factor``:
    that many times the protocol's choice; either way at most ``max_calls_per_sample`` and the memory bound."""

    text: str
    calls: Optional[int] = None
    factor: Optional[float] = None

    @classmethod
    def parse(cls, text: str) -> "KOverride":
        t = text.strip().lower()
        try:
            if t.startswith("x"):
                factor = float(t[1:])
                if factor > 0 and math.isfinite(factor):
                    return cls(text, factor=factor)
            else:
                calls = int(t)
                if calls >= 1:
                    return cls(text, calls=calls)
        except ValueError:
            pass
        raise ValueError(f"--autotune-k={text!r}: give a number of calls per sample (e.g. 1) or a multiple of the "
                         "protocol's choice (e.g. x4)")

    def apply(self, k: int, plan: TimingPlan, cap: Optional[int]) -> int:
        want = self.calls if self.calls is not None else round(k * (self.factor or 1.0))
        return int(min(max(1, want), plan.max_calls_per_sample, cap or plan.max_calls_per_sample))


def decide_timing_mode(infos: dict[str, dict], graph_below_s: float) -> dict[str, Any]:
    """CUDA graphs for both arms, or eager for both, from both arms' calibration (or capture-probe) reports.

    The baseline's calls (``A``) decide: graphs where its fastest test-captured call is shorter than
    ``graph_below_s``. What the candidate reports of its own speed decides nothing (docs/architecture.md, "The
    sample's shape"); it can only refuse to be captured (a failed capture, or none tried), which makes both arms
    eager: an eager sample times each call's launch as well, so a candidate gains no hidden work by forcing it."""
    if not any("fastest_graph_call_s" in i or "capture_failures" in i for i in infos.values()):
        return {}  # this device has no modes
    if graph_below_s <= 0:
        return {"graphs": False, "reason": "graphs off (graph_below_s = 0)"}
    for arm in sorted(infos):
        failures = infos[arm].get("capture_failures") or []
        if failures:
            return {"graphs": False, "reason": f"eager: a calibration call of arm {arm} could not be captured "
                                               f"({failures[0]})"}
    base = (infos.get("A") or {}).get("fastest_graph_call_s")
    if base is None:
        return {"graphs": False, "reason": "eager: no baseline calibration call was short enough to try a graph"}
    if base >= graph_below_s:
        return {"graphs": False, "reason": f"eager: the baseline's fastest calibration call {base * 1e6:.2f} us >= "
                                           f"{graph_below_s * 1e6:g} us"}
    unknown = [arm for arm, i in sorted(infos.items()) if i.get("fastest_graph_call_s") is None]
    if unknown:
        return {"graphs": False, "reason": f"eager: arm {unknown[0]} was not test-captured as a graph"}
    return {"graphs": True,
            "reason": f"graph: the baseline's fastest calibration call {base * 1e6:.2f} us < {graph_below_s * 1e6:g} us"}


def decide_head_start(infos: dict[str, dict]) -> dict[str, Any]:
    """The head start for both arms, from the baseline's sandbox alone (``[devices.cuda].head_start``).

    Where the baseline's sandbox stopped holding during calibration (its hold ran out twice in a row: a call whose
    host path outlasts ``head_start_max_s``, or one that synchronises; or the hold failed), the candidate's stops too:
    a sample's host-minus-event time then means the same thing in both arms, which ``DeviceClockGate`` compares. With
    the baseline unheld and the candidate held, the candidate's first call's host path lands in that difference and
    nowhere in the baseline's: on the H200, 12_batched_small_matmul's honest ``bmm`` (0.7 ms a call, the reference's
    Python loop 5 ms) was refused for it at protocol 9's first pin. The candidate's own hold running out decides only
    its own sandbox: it puts its host path on its own clock."""
    base = infos.get("A") or {}
    setting = base.get("head_start_setting")
    if setting in (None, "off") or base.get("head_start") != "off":
        return {}
    why = base.get("head_start_reason") or "no hold could be set up"
    return {"head_start": "off",
            "head_start_reason": f"the baseline's sandbox stopped holding ({why}): neither arm holds"}


__all__ = ["decide_head_start", "HOST_MEMORY_SHARE", "host_memory_cap", "KOverride", "k_disagrees", "choose_calls_per_sample", "sample_length", "decide_timing_mode", "memory_cap", "MEMORY_SHARE", "SETS_PER_CALL"]
