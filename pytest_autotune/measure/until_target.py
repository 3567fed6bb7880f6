"""``--autotune-max-pairs=N``: an item adds pairs of processes until its pooled CI reaches the protocol's target, at
most N (docs/guide/precision.md#until-the-target-autotune-max-pairsn).

Items differ in how far one pair of processes' speedup scatters (on the 2-vCPU VM from 1.7% to 10.6% over the main
job's items, 64 pairs each: docs/results/cpu.md): a fixed number of pairs an item is too many for most items and too
few for the few that scatter most. This rule gives each item the pairs it needs. Every pair is timed as the protocol
times one (the budget of one pair, its order, its inputs and gates); what the rule decides is only whether another
one starts.

The decision rests on the protocol's own CI (measure/stats.py ``clustered_estimate``, widened by
``with_process_offsets``), the one the item reports: an item stops when that CI is at most the target. Stopping
when a CI is narrow enough is the fixed-width sequential interval of Chow and Robbins (1965); it looks at the CI's
width, never at where the speedup lies, so it cannot stop an item because its speedup happens to read high. The
protocol's CI costs seconds once an item has a hundred pairs (a bootstrap of 2000 resamples of pairs of processes
and the ratios within each: 3.3 s at 100 pairs of 46 ratios on the VM), more than a pair of processes itself, so
it is computed only where it can pass: when a normal-theory width of the pairs' medians, which the bootstrap's is
never much below (``OPTIMISTIC_C``), is at most the target; and after a reading above the target, not again before
half the pairs between it and those that reading projects for the target (width falls as 1/sqrt(pairs)), and at
least ``MIN_STEP`` of the pairs so far later. Each item so reads its CI a handful of times, and stops at most about
half its last gap beyond where it reached the target. (Until 2026-12-05 the next reading also waited for the cheap
width scaled by the bootstrap's ratio to it at the last reading; that ratio falls as pairs are added, and on the VM
one item read 2.68% at 448 pairs where it had reached 3% near 360.)
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import TYPE_CHECKING, Callable, Optional, Sequence

if TYPE_CHECKING:  # pragma: no cover
    from ..protocol import Protocol, TimingPlan

#: the cheap width's factor on the pairs' sd: a normal mean's. The protocol's bootstrap of a median of pairs'
#: medians reads 1.2-1.6 times that (report/precision.py C; benchmarks/harness/precision_model.py), so a cheap
#: width above the target means the protocol's is too
OPTIMISTIC_C = 1.0
#: after a full reading of ``w`` at ``n`` pairs, which projects ``n * (w / target)**2`` pairs for the target, the next
#: is this share of the way there: short of the projection, because a reading's width is itself noisy
RECHECK_SHARE = 0.5
#: and at least this share of the pairs so far later: a reading costs a bootstrap over all of them
MIN_STEP = 0.05


@dataclass
class UntilTarget:
    """The stopping rule of one item. ``reached(logs, full_width)``: ``logs`` the log speedups of the pairs of
    processes timed so far (None for a pair without an estimate), ``full_width`` a callable that pools them as the
    protocol does and returns the CI's (hi - lo) / speedup."""

    target: float
    offset_sd: float
    ci_level: float
    #: no stop before this many pairs: the protocol's own (``[timing].process_pairs``)
    min_pairs: int
    next_full_at: int = 0
    #: (pairs, width) of every reading of the protocol's CI, for the item's details
    readings: list[tuple[int, float]] = field(default_factory=list)

    @property
    def z(self) -> float:
        return NormalDist().inv_cdf(0.5 + self.ci_level / 2.0)

    def cheap_width(self, logs: Sequence[float]) -> Optional[float]:
        """A normal mean's CI width from the pairs' log speedups and the protocol's offset term (None: fewer than
        two pairs)."""
        if len(logs) < 2:
            return None
        half = self.z * math.hypot(OPTIMISTIC_C * statistics.stdev(logs), self.offset_sd) / math.sqrt(len(logs))
        return 2.0 * math.sinh(half)

    def reached(self, logs: Sequence[Optional[float]], full_width: Callable[[], float]) -> bool:
        n = len(logs)
        if n < self.min_pairs or n < self.next_full_at:
            return False
        cheap = self.cheap_width([v for v in logs if v is not None])
        if cheap is not None and cheap > self.target:
            return False
        width = full_width()
        self.readings.append((n, width))
        if width <= self.target:
            return True
        projected = n * (width / self.target) ** 2
        self.next_full_at = n + max(1, math.ceil(RECHECK_SHARE * (projected - n)), math.ceil(MIN_STEP * n))
        return False


def rule_for(protocol: "Protocol", device: str, plan: "TimingPlan") -> UntilTarget:
    """The rule of one item under ``--autotune-max-pairs`` with ``plan`` (its N pairs of processes): no stop before
    the protocol's own pairs of processes on ``device``."""
    own = protocol.timing_plan(device)
    return UntilTarget(target=plan.ci_target_rel_width, offset_sd=plan.process_offset_sd,
                       ci_level=protocol.statistics.ci_level, min_pairs=min(own.process_pairs, plan.process_pairs))


__all__ = ["UntilTarget", "rule_for", "OPTIMISTIC_C", "RECHECK_SHARE", "MIN_STEP"]
