"""The run's precision in one line: how many items reached the protocol's CI target, how wide the CIs were, and what
would reach it (``--autotune-max-pairs``), at what cost in time (docs/guide/precision.md).

The model (a CI's width as a function of the pairs of processes ``n``; log scale, ``z`` from ``[statistics].ci_level``):

    half-width(n) = z * sqrt((C * s)**2 + offset_sd**2) / sqrt(n)

* ``s``: how far one pair of processes' speedup scatters around its item's (an sd, log scale). It holds the
  per-process offset and the pair's own sampling noise together, and items differ: on the 2-vCPU VM it ran from 1.7%
  to 10.6% over the main job's items (64 pairs each, protocol 9), and from 1.0% to 10.1% (72 pairs, protocol 8).
  A run whose items all ran MANY_PAIRS pairs or more measures each item's own ``s``. A run of two pairs an item
  cannot tell its items apart (one degree of freedom each): it measures the rms of the items' scatters (the mean of
  their pairs' variances, unbiased whatever the items' spread) and takes the items' spread around that rms from the
  two runs that measured every item's own: PROFILE, the scatters over their rms at the twelfths of those 38 items,
  and FIVE_SIXTHS, the item at five sixths (1.45 times the rms in both runs).
* ``offset_sd``: what the protocol adds to every pooled CI for the offset a few pairs cannot estimate
  (``[devices.cpu].process_offset_sd``; ``measure/stats.py`` ``with_process_offsets``): z * offset_sd / sqrt(n) in
  quadrature.
* ``C`` = 1.4: the CI's bootstrap (pairs of processes resampled, then ratios within each) of a median of pairs'
  medians, against a normal mean's z * sd / sqrt(n): 1.2533 for a median, more for the resampling within pairs.
  ``python3 benchmarks/harness/precision_model.py`` simulates the protocol's own estimator and prints it (1.2-1.5
  at 12-40 pairs); the 64-pair run read 1.2 on its items that scatter most and up to 1.6 on those that scatter least.

The suggestion is ``--autotune-max-pairs=N`` (measure/until_target.py): every item adds pairs of processes until its
CI reaches the target, at most N. N is the fewest pairs at which the item at five sixths reaches the target with
the model's width times SPREAD = 1.1 (the margin for where an item's own readings stop around the model's), its
scatter taken at the SIZING_CONFIDENCE upper bound of what the run measured, so that about five items of six reach it
even where the run read this machine's scatter low.

How sure the scatter is: a mean of the items' pair variances with ``d`` degrees of freedom (one an item with two
pairs) is a chi-square's worth of noise, with fewer effective degrees of freedom where the items differ:
``d / PROFILE_KURTOSIS`` on a two-pair run (about 10 for 20 items: the rms reads 0.63 to 1.35 times the truth in nine
runs of ten), each item's own variances' where they were measured. Two pairs an item also read low on the VM:
FEW_PAIRS_UNDERREAD.

Its time: each item's time outside timing, plus its pairs times its timing stage's seconds a pair of processes
(sandbox starts included), from this run; "about" with each item stopping where the model says (on a two-pair run,
the items' spread taken from PROFILE), a TIME_RANGE range with the scatter at the ends of its chi-square interval, and
"at most" with every item at N.
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
#: the width an item reads where it stops, over the model's, that the suggestion's cap leaves room for
SPREAD = 1.1
#: the scatter of the item at five sixths over the rms of the items' scatters, in both runs that measured every item's
#: own on the 2-vCPU VM (docs/data/cpu-protocol9-vm-2026-12-05/pairs-64.json, 20 items at 64 pairs: 1.45;
#: docs/data/cpu-precision-vm-2026-12-05/pairs-72-part*.json, 18 items at 72 pairs: 1.45)
FIVE_SIXTHS = 1.45
#: the items' scatters over their rms at the twelfths of the same 38 items: how a run that cannot tell its items
#: apart predicts the time of items that each stop where they reach the target
PROFILE = (0.26, 0.41, 0.47, 0.55, 0.59, 0.73, 0.80, 0.84, 1.01, 1.45, 1.56, 1.76)
#: the profile's mean fourth power over its mean square squared: how much more a mean of the items' pair variances
#: scatters where items differ as PROFILE does than where they are alike (its degrees of freedom divide by this)
PROFILE_KURTOSIS = statistics.fmean(q ** 4 for q in PROFILE) / statistics.fmean(q * q for q in PROFILE) ** 2
#: the one-sided confidence of the scatter the suggestion is sized for: the run's estimate is raised to the bound it
#: stays under in that share of runs (four two-pair main jobs on the VM read 0.71-1.09 times what many pairs measured)
SIZING_CONFIDENCE = 0.8
#: the share of runs whose time the stated range holds, the model's other parts right
TIME_RANGE = 0.9
#: a many-pair run's scatter over what the same machine's two-pair runs measured (the mean of their variances' ratio,
#: its root): the VM's four two-pair main jobs at protocol 9 read 1.19, 0.87, 0.75 and 0.50 of the variance that 64
#: and 308 pairs an item measured, 0.83 on average; in those many-pair runs an item's first two pairs agree better
#: than later ones do (docs/design/protocol.md, "Odd and even pairs"). Applied to a run of fewer than MANY_PAIRS
#: pairs an item
FEW_PAIRS_UNDERREAD = 1.10
#: fewest items with two pairs of processes behind a measured scatter
MIN_ITEMS = 3
#: pairs of processes an item from which its own scatter counts as measured
MANY_PAIRS = 6
#: the most pairs of processes --autotune-pairs and --autotune-max-pairs take (plugin.py)
MOST_PAIRS = 1000


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

    def pairs_for(self, target: float, spread: float = 1.0, limit: int = 100_000) -> int:
        """The fewest pairs of processes whose predicted width times ``spread`` is at most ``target`` (``limit``
        where none up to it is)."""
        if target <= 0:
            raise ValueError("the target width must be positive")

        def fits(n: int) -> bool:
            return spread * self.rel_width(n) <= target

        # the width falls as 1/sqrt(n): the closed form's n, then a step either way for its rounding
        half = self.half_width(1)
        n = 1 if half == 0 else min(limit, max(1, math.ceil((half / math.asinh(target / (2.0 * spread))) ** 2)))
        while n > 1 and fits(n - 1):
            n -= 1
        while n < limit and not fits(n):
            n += 1
        return n


@dataclass(frozen=True)
class Scatter:
    """One pair of processes' scatter as a run measured it: ``rms`` over the items (the root of the mean of their
    pairs' variances), and each item's own sd where every item ran MANY_PAIRS pairs or more (``per_item``)."""

    rms: float
    items: int
    per_item: Optional[tuple[float, ...]] = None
    #: the effective degrees of freedom of ``rms ** 2`` (a chi-square's, ``2 / relative variance``)
    dof: float = math.inf

    @property
    def basis(self) -> str:
        return "each item" if self.per_item is not None else "rms"

    def five_sixths(self) -> float:
        """The scatter of the item at five sixths: measured where each item's is, else FIVE_SIXTHS times the rms."""
        if self.per_item is not None:
            ordered = sorted(self.per_item)
            return ordered[math.ceil(len(ordered) * 5 / 6) - 1]
        return FIVE_SIXTHS * self.rms

    def variance_factor(self, quantile: float) -> float:
        """The factor on the measured variances that is their ``quantile`` bound: the true variance lies below
        ``factor * measured`` in that share of runs (chi-square with ``dof``)."""
        if math.isinf(self.dof):
            return 1.0
        return self.dof / chi2_quantile(1.0 - quantile, self.dof)


def chi2_quantile(p: float, dof: float) -> float:
    """The ``p`` quantile of a chi-square with ``dof`` (any positive real) degrees of freedom: bisection on the
    regularized lower incomplete gamma's series. Hand-written because the runtime has no scipy; exact to 1e-9."""
    a = dof / 2.0

    def cdf(x: float) -> float:
        y = x / 2.0
        term = total = 1.0 / a
        n = 0
        while term > total * 1e-15:
            n += 1
            term *= y / (a + n)
            total += term
        return math.exp(a * math.log(y) - y - math.lgamma(a)) * total

    lo, hi = 1e-12, 10.0 * dof + 100.0
    for _ in range(100):
        mid = (lo + hi) / 2.0
        lo, hi = (mid, hi) if cdf(mid) < p else (lo, mid)
    return (lo + hi) / 2.0


def scatter_from(log_pairs: Sequence[Sequence[Optional[float]]]) -> Optional[Scatter]:
    """The scatter of the items' pairs' log speedups (None with fewer than MIN_ITEMS items of two pairs or more)."""
    variances: list[float] = []
    dofs: list[int] = []
    for pairs in log_pairs:
        values = [v for v in pairs if v is not None]
        if len(values) >= 2:
            variances.append(statistics.variance(values))
            dofs.append(len(values) - 1)
    if len(variances) < MIN_ITEMS:
        return None
    rms = math.sqrt(statistics.fmean(variances))
    if min(dofs) + 1 >= MANY_PAIRS:  # each item's own variance, its noise 2 v**2 / d
        total = sum(variances)
        noise = sum(2.0 * v * v / d for v, d in zip(variances, dofs))
        dof = 2.0 * total * total / noise if noise > 0 else math.inf
        return Scatter(rms=rms, items=len(variances), per_item=tuple(math.sqrt(v) for v in variances), dof=dof)
    return Scatter(rms=rms, items=len(variances), dof=sum(dofs) / PROFILE_KURTOSIS)


@dataclass(frozen=True)
class PrecisionSummary:
    items: int
    reached: int
    target: float
    median_width: float
    pairs_now: int
    pair_sd: Optional[float]  # the rms of the items' scatters; None: too few items to measure it
    pair_sd_five_sixths: Optional[float]  # the item's at five sixths, as measured
    sd_items: int
    pair_sd_basis: str  # "rms": the items' spread from PROFILE; "each item": every item's own, measured
    offset_sd: float
    offset_key: str
    suggested: Optional[int]  # --autotune-max-pairs; None when every item reached the target
    predicted_reached: Optional[int]  # items the model says reach the target within ``suggested``
    expected_seconds: Optional[float]  # the run with ``suggested``, each item stopping where the model says
    most_seconds: Optional[float]  # ... with every item at ``suggested`` pairs
    pair_sd_sized: Optional[float] = None  # the scatter ``suggested`` is sized for: five sixths at SIZING_CONFIDENCE
    scatter_dof: Optional[float] = None  # the effective degrees of freedom of the measured scatter
    expected_seconds_low: Optional[float] = None  # the TIME_RANGE range of ``expected_seconds``
    expected_seconds_high: Optional[float] = None

    def line(self) -> str:
        head = (f"precision: {self.reached} of {self.items} item(s) reached the {self.target:.1%} CI target "
                f"(median CI {self.median_width:.1%} wide, {self.pairs_now} pair(s) of processes an item)")
        if self.suggested is None:
            return head
        if self.pair_sd is not None and self.pair_sd_basis == "each item":
            spread = (f"one pair of processes' speedup scatters by {self.pair_sd:.1%} here (rms over the "
                      f"{self.sd_items} items' pairs), {self.pair_sd_five_sixths:.1%} in the item at five sixths")
        elif self.pair_sd is not None:
            spread = (f"one pair of processes' speedup scatters by {self.pair_sd:.1%} here (rms over the "
                      f"{self.sd_items} items' pairs; where each item's was measured, the item at five sixths "
                      f"scattered {FIVE_SIXTHS:g}x the rms, and many pairs {FEW_PAIRS_UNDERREAD:g}x what two read)")
        else:
            spread = f"too few items with two pairs of processes to measure this machine's scatter ({self.sd_items})"
        offset = f"; the protocol adds {self.offset_sd:.1%} ({self.offset_key})" if self.offset_sd > 0 else ""
        sized = ""
        if self.pair_sd_sized is not None and self.pair_sd_five_sixths is not None:
            sized = (f" (sized for {self.pair_sd_sized:.1%}: the item at five sixths at the {SIZING_CONFIDENCE:.0%} "
                     f"bound of the scatter)")
        cost = ""
        if self.expected_seconds is not None and self.most_seconds is not None:
            likely = ""
            if (self.expected_seconds_low is not None and self.expected_seconds_high is not None
                    and _minutes(self.expected_seconds_low) != _minutes(self.expected_seconds_high)):
                likely = (f"{TIME_RANGE:.0%} range {_minutes(self.expected_seconds_low)} to "
                          f"{_minutes(self.expected_seconds_high)}, ")
            cost = (f" in about {_minutes(self.expected_seconds)} for these {self.items} ({likely}at most "
                    f"{_minutes(self.most_seconds)})")
        return (f"{head}; {spread}{offset}: --autotune-max-pairs={self.suggested}{sized} would reach "
                f"{self.target:.1%} on about {self.predicted_reached} of {self.items}, each item stopping at the "
                f"target{cost} (model: docs/guide/precision.md)")


def _minutes(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"


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
    scatter = scatter_from([p.get("pair_log_speedups") or [] for p in prec])
    base = dict(items=len(timed), reached=reached, target=target, median_width=statistics.median(widths),
                pairs_now=pairs_now, pair_sd=scatter.rms if scatter else None,
                pair_sd_five_sixths=scatter.five_sixths() if scatter else None,
                sd_items=scatter.items if scatter else sum(1 for p in prec if len(p.get("pair_log_speedups") or []) > 1),
                pair_sd_basis=scatter.basis if scatter else "rms", offset_sd=offset_sd, offset_key=offset_key)
    if reached == len(timed):
        return PrecisionSummary(**base, suggested=None, predicted_reached=None,  # type: ignore[arg-type]
                                expected_seconds=None, most_seconds=None)
    z = NormalDist().inv_cdf(0.5 + ci_level / 2.0)

    def needs(s: float, spread: float = 1.0) -> int:
        return PrecisionModel(z=z, pair_sd=s, offset_sd=offset_sd).pairs_for(target, spread)

    # the scatters the items' stops follow: each item's own where measured, else PROFILE around the rms
    few = 1.0 if scatter is None or scatter.per_item is not None else FEW_PAIRS_UNDERREAD

    def item_needs(variance_factor: float = 1.0) -> list[int]:
        scale = few * math.sqrt(variance_factor)
        if scatter is not None and scatter.per_item is not None:
            return [needs(s * scale) for s in scatter.per_item]
        return [needs(q * (scatter.rms if scatter else 0.0) * scale) for q in PROFILE]

    sized = few * scatter.five_sixths() * math.sqrt(scatter.variance_factor(SIZING_CONFIDENCE)) if scatter else None
    cap = min(max(needs(sized or 0.0, SPREAD), pairs_now + 1), MOST_PAIRS)
    point = item_needs()
    # the share of items within the cap, averaged over where the true scatter may lie (deciles of its chi-square)
    shares = [sum(1 for n in needs_at if n <= cap) / len(needs_at)
              for needs_at in (item_needs(scatter.variance_factor((k + 0.5) / 10)) if scatter else point
                               for k in range(10))]
    predicted = round(len(timed) * statistics.fmean(shares))
    expected, most = _cost(timed, [min(cap, n) for n in point], cap)
    low = high = None
    if scatter is not None:
        tail = (1.0 - TIME_RANGE) / 2.0
        low = _cost(timed, [min(cap, n) for n in item_needs(scatter.variance_factor(tail))], cap)[0]
        high = _cost(timed, [min(cap, n) for n in item_needs(scatter.variance_factor(1.0 - tail))], cap)[0]
    return PrecisionSummary(**base, suggested=cap, predicted_reached=predicted,  # type: ignore[arg-type]
                            expected_seconds=expected, most_seconds=most, pair_sd_sized=sized,
                            scatter_dof=scatter.dof if scatter and math.isfinite(scatter.dof) else None,
                            expected_seconds_low=low,
                            expected_seconds_high=high)


def session_precision(snap: "SessionSnapshot") -> Optional[PrecisionSummary]:
    """The summary of a session that timed (None otherwise), with its device's target and offset term."""
    if not snap.measuring:
        return None
    plan = snap.protocol.timing_plan(snap.device)
    return summarize_precision(snap.outcomes, target=plan.ci_target_rel_width, offset_sd=plan.process_offset_sd,
                               ci_level=snap.protocol.statistics.ci_level,
                               offset_key=f"[devices.{snap.device}].process_offset_sd")


def _cost(timed: Sequence["ItemOutcome"], pairs: Sequence[int], cap: int) -> tuple[Optional[float], Optional[float]]:
    """Predicted seconds of the run: (about, at most). Each item costs its time outside timing as it was, plus
    pairs of processes at its timing stage's seconds a pair. "About": the items' pairs are ``pairs`` (one per item
    where each item's need was measured, in the items' order; else the profile's, averaged over the items);
    "at most": every item at ``cap``. (None, None) where an item lacks its timings."""
    outside, per_pair = [], []
    for o in timed:
        p = o.details["precision"]
        stage, item = p.get("timing_stage_s"), o.details.get("item_seconds")
        done = int(p.get("pairs_of_processes") or 1)
        if not isinstance(stage, (int, float)) or not isinstance(item, (int, float)) or done < 1:
            return None, None
        outside.append(max(0.0, item - stage))
        per_pair.append(stage / done)
    if len(pairs) == len(timed):
        about = sum(o + n * s for o, n, s in zip(outside, pairs, per_pair))
    else:
        about = sum(outside) + statistics.fmean(per_pair) * len(timed) * statistics.fmean(pairs)
    return about, sum(o + cap * s for o, s in zip(outside, per_pair))


__all__ = ["C", "SPREAD", "FIVE_SIXTHS", "PROFILE", "PROFILE_KURTOSIS", "FEW_PAIRS_UNDERREAD", "SIZING_CONFIDENCE",
           "TIME_RANGE", "MANY_PAIRS", "MOST_PAIRS", "PrecisionModel", "chi2_quantile", "PrecisionSummary", "Scatter",
           "scatter_from", "summarize_precision", "session_precision"]
