"""The run's precision in one line: how many items reached the protocol's CI target, how wide the CIs were, and how
many pairs of processes (``--autotune-pairs``) would reach it, at what cost in time (docs/guide/precision.md).

The model (a CI's width as a function of the pairs of processes ``n``; log scale, ``z`` from ``[statistics].ci_level``):

    half-width(n) = z * sqrt((C * pair_sd)**2 + offset_sd**2) / sqrt(n)

* ``pair_sd``: how far one pair of processes' speedup scatters around the item's, measured from the run itself:
  per item, the standard deviation of its pairs' log speedups, divided by the median of that estimate's sampling
  distribution for its degrees of freedom (sqrt(median(chi2_df) / df): 0.6745 for two pairs, whose sd is
  |log s1 - log s2| / sqrt(2)); then the median over items. It holds the per-process offset and the pair's own
  sampling noise together.
  With every item timed in MANY_PAIRS pairs of processes or more (a run with ``--autotune-pairs``), each item's
  own scatter is measured, and the items differ (on the 2-vCPU VM from 1% to 10%): ``pair_sd`` is then the item's
  at five sixths of the run, so that the suggestion covers the items that scatter most, not only the median one.
* ``offset_sd``: what the protocol adds to every pooled CI for the offset a few pairs cannot estimate
  (``[devices.cpu].process_offset_sd``; ``measure/stats.py`` ``with_process_offsets``): z * offset_sd / sqrt(n) in
  quadrature.
* ``C`` = 1.4: the CI's bootstrap (pairs of processes resampled, then ratios within each) of a median of pairs'
  medians, against a normal mean's z * sd / sqrt(n): 1.2533 for a median, more for the resampling within pairs.
  ``python3 benchmarks/harness/precision_model.py`` simulates the protocol's own estimator and prints it (1.2-1.4
  at 12-40 pairs).

The suggestion is the fewest pairs whose predicted width, times ``SPREAD`` = 1.1 (at 12-40 pairs the width of the
item at five sixths of a run is ~1.1 times the median item's, same script), is at most the target: the target on
about five items of six. Its time: each item's time outside timing, plus ``n`` times its timing stage's seconds a
pair of processes (sandbox starts included), from this run.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from statistics import NormalDist
from typing import TYPE_CHECKING, Optional, Sequence

if TYPE_CHECKING:  # pragma: no cover
    from ..result import ItemOutcome
    from .snapshot import SessionSnapshot

#: the bootstrap's width for a median of pairs' medians over a normal mean's (benchmarks/harness/precision_model.py)
C = 1.4
#: the width of the item at five sixths of a run over the median item's, at 12-40 pairs (same script)
SPREAD = 1.1
#: fewest items with two pairs of processes behind a measured pair_sd
MIN_ITEMS = 3
#: pairs of processes an item from which its own scatter counts as measured (pair_sd: the items' at five sixths)
MANY_PAIRS = 6


@dataclass(frozen=True)
class PrecisionModel:
    z: float
    pair_sd: float  # log scale
    offset_sd: float  # log scale

    def half_width(self, pairs: int) -> float:
        """Predicted half-width of the CI on the log scale with ``pairs`` pairs of processes."""
        return self.z * math.hypot(C * self.pair_sd, self.offset_sd) / math.sqrt(pairs)

    def rel_width(self, pairs: int) -> float:
        """Predicted (hi - lo) / speedup, the protocol's ``ci_target_rel_width`` measure."""
        return 2.0 * math.sinh(self.half_width(pairs))

    def pairs_for(self, target: float, limit: int = 100_000) -> int:
        """The fewest pairs of processes whose predicted width times SPREAD is at most ``target``."""
        if target <= 0:
            raise ValueError("the target width must be positive")
        n = 1
        while SPREAD * self.rel_width(n) > target and n < limit:
            n += 1
        return n


def _median_sd_ratio(df: int) -> float:
    """The median of a sample sd over the true sd, with ``df`` degrees of freedom: sqrt(median(chi2_df) / df)
    (exact for df = 1, Wilson-Hilferty's approximation of the chi-square median above it)."""
    if df == 1:
        return NormalDist().inv_cdf(0.75)
    return math.sqrt((1.0 - 2.0 / (9.0 * df)) ** 3)


def pair_sd_from(log_pairs: Sequence[Sequence[Optional[float]]]) -> tuple[Optional[float], int, str]:
    """``pair_sd`` from the items' pairs' log speedups: (sd, items used, "median" or "five sixths"); sd None when
    fewer than MIN_ITEMS items had two pairs or more."""
    per_item, least = [], None
    for pairs in log_pairs:
        values = [v for v in pairs if v is not None]
        if len(values) >= 2:
            per_item.append(statistics.stdev(values) / _median_sd_ratio(len(values) - 1))
            least = len(values) if least is None else min(least, len(values))
    if len(per_item) < MIN_ITEMS:
        return None, len(per_item), "median"
    if least is not None and least >= MANY_PAIRS:
        ordered = sorted(per_item)
        return ordered[math.ceil(len(ordered) * 5 / 6) - 1], len(per_item), "five sixths"
    return statistics.median(per_item), len(per_item), "median"


@dataclass(frozen=True)
class PrecisionSummary:
    items: int
    reached: int
    target: float
    median_width: float
    pairs_now: int
    pair_sd: Optional[float]  # None: too few items to measure it; the model then uses offset_sd alone
    sd_items: int
    pair_sd_basis: str  # "median": the median item's scatter; "five sixths": the item's at five sixths
    offset_sd: float
    offset_key: str
    suggested: Optional[int]  # None when every item reached the target
    item_seconds: Optional[float]  # median predicted seconds an item with ``suggested`` pairs
    total_seconds: Optional[float]

    def line(self) -> str:
        head = (f"precision: {self.reached} of {self.items} item(s) reached the {self.target:.1%} CI target "
                f"(median CI {self.median_width:.1%} wide, {self.pairs_now} pair(s) of processes an item)")
        if self.suggested is None:
            return head
        if self.pair_sd is not None and self.pair_sd_basis == "five sixths":
            spread = (f"one pair of processes' speedup scatters by {self.pair_sd:.1%} here in the item at five "
                      f"sixths of the {self.sd_items} (sd over its pairs)")
        elif self.pair_sd is not None:
            spread = (f"one pair of processes' speedup scatters by {self.pair_sd:.1%} here (sd over the "
                      f"{self.sd_items} items' pairs)")
        else:
            spread = f"too few items with two pairs of processes to measure this machine's scatter ({self.sd_items})"
        offset = f" and the protocol adds {self.offset_sd:.1%} ({self.offset_key})" if self.offset_sd > 0 else ""
        cost = ""
        if self.item_seconds is not None and self.total_seconds is not None:
            cost = (f" in about {self.item_seconds:.0f} s an item ({self.total_seconds / 60:.0f} min for these "
                    f"{self.items})")
        return (f"{head}; {spread}{offset}: --autotune-pairs={self.suggested} would reach {self.target:.1%} on "
                f"about 5 items of 6{cost} (model: docs/guide/precision.md)")


def summarize_precision(outcomes: Sequence["ItemOutcome"], *, target: float, offset_sd: float, ci_level: float,
                        offset_key: str = "[devices.cpu].process_offset_sd") -> Optional[PrecisionSummary]:
    """The summary of the run's timed items (None when none was timed). Reads each item's ``details.precision``
    (item_run.measurement)."""
    timed = [o for o in outcomes if o.verdict == "accepted" and o.measurement is not None
             and isinstance(o.details.get("precision"), dict)]
    if not timed:
        return None
    prec = [o.details["precision"] for o in timed]
    widths = [float(p["ci_rel_width"]) for p in prec]
    reached = sum(1 for o in timed if o.measurement is not None and o.measurement.ci_target_met)
    pairs_now = int(statistics.median(int(p.get("pairs_of_processes") or 1) for p in prec))
    pair_sd, sd_items, basis = pair_sd_from([p.get("pair_log_speedups") or [] for p in prec])
    base = dict(items=len(timed), reached=reached, target=target, median_width=statistics.median(widths),
                pairs_now=pairs_now, pair_sd=pair_sd, sd_items=sd_items, pair_sd_basis=basis, offset_sd=offset_sd,
                offset_key=offset_key)
    if reached == len(timed):
        return PrecisionSummary(**base, suggested=None, item_seconds=None, total_seconds=None)  # type: ignore[arg-type]
    z = NormalDist().inv_cdf(0.5 + ci_level / 2.0)
    model = PrecisionModel(z=z, pair_sd=pair_sd if pair_sd is not None else 0.0, offset_sd=offset_sd)
    n = max(model.pairs_for(target), pairs_now + 1)
    item_s, total_s = _cost(timed, n)
    return PrecisionSummary(**base, suggested=n, item_seconds=item_s, total_seconds=total_s)  # type: ignore[arg-type]


def session_precision(snap: "SessionSnapshot") -> Optional[PrecisionSummary]:
    """The summary of a session that timed (None otherwise), with its device's target and offset term."""
    if not snap.measuring:
        return None
    plan = snap.protocol.timing_plan(snap.device)
    return summarize_precision(snap.outcomes, target=plan.ci_target_rel_width, offset_sd=plan.process_offset_sd,
                               ci_level=snap.protocol.statistics.ci_level,
                               offset_key=f"[devices.{snap.device}].process_offset_sd")


def _cost(timed: Sequence["ItemOutcome"], pairs: int) -> tuple[Optional[float], Optional[float]]:
    """Predicted seconds of each item with ``pairs`` pairs of processes: its time outside timing as it was, and its
    timing stage's seconds a pair of processes times ``pairs``. (median item, sum) or (None, None)."""
    predicted = []
    for o in timed:
        p = o.details["precision"]
        stage, item = p.get("timing_stage_s"), o.details.get("item_seconds")
        done = int(p.get("pairs_of_processes") or 1)
        if not isinstance(stage, (int, float)) or not isinstance(item, (int, float)) or done < 1:
            return None, None
        predicted.append(max(0.0, item - stage) + pairs * stage / done)
    return statistics.median(predicted), sum(predicted)


__all__ = ["C", "SPREAD", "MANY_PAIRS", "PrecisionModel", "PrecisionSummary", "pair_sd_from", "summarize_precision",
           "session_precision"]
