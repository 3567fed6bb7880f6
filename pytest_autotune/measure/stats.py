"""Paired statistics: speedup = median of paired ratios, with a bootstrap percentile CI of that median.

Each pair is one baseline sample and one candidate sample taken back to back on the same inputs; its ratio
``baseline / candidate`` cancels slow drifts of the machine that absolute times carry. The bootstrap resamples
pairs (not arms), so the CI is that of the paired quantity. Resampling uses a seeded generator: the same samples
give the same CI.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from statistics import NormalDist
from typing import Sequence

import numpy as np


@dataclass(frozen=True)
class PairedEstimate:
    n_pairs: int
    speedup: float
    ci_low: float
    ci_high: float
    baseline_s: float  # median per-call time of the baseline arm
    candidate_s: float

    @property
    def rel_width(self) -> float:
        return (self.ci_high - self.ci_low) / self.speedup if self.speedup > 0 else float("inf")

    def contains(self, value: float) -> bool:
        return self.ci_low <= value <= self.ci_high


def bootstrap_median_ci(values: "Sequence[float] | np.ndarray", level: float, resamples: int, seed: int) -> tuple[float, float]:
    x = np.asarray(values, dtype=np.float64)
    n = x.size
    if n == 0:
        raise ValueError("no values")
    if n == 1:
        return float(x[0]), float(x[0])
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n, size=(resamples, n))
    medians = np.median(x[idx], axis=1)
    alpha = (1.0 - level) / 2.0
    lo, hi = np.quantile(medians, [alpha, 1.0 - alpha])
    return float(lo), float(hi)


def paired_estimate(baseline: Sequence[float], candidate: Sequence[float], *, level: float, resamples: int,
                    seed: int) -> PairedEstimate:
    """``baseline[i]`` and ``candidate[i]`` are the per-call times of pair ``i``."""
    b = np.asarray(baseline, dtype=np.float64)
    c = np.asarray(candidate, dtype=np.float64)
    if b.shape != c.shape or b.size == 0:
        raise ValueError("paired samples must be non-empty and of equal length")
    if np.any(b <= 0) or np.any(c <= 0):
        raise ValueError("non-positive sample time: the timer did not advance")
    ratios = b / c
    med = float(np.median(ratios))
    lo, hi = bootstrap_median_ci(ratios, level, resamples, seed)
    # the percentile CI of a median can exclude the point estimate only by interpolation artefacts
    lo, hi = min(lo, med), max(hi, med)
    return PairedEstimate(
        n_pairs=int(b.size), speedup=med, ci_low=lo, ci_high=hi,
        baseline_s=float(np.median(b)), candidate_s=float(np.median(c)),
    )


def clustered_estimate(groups: Sequence[tuple[Sequence[float], Sequence[float]]], *, level: float, resamples: int,
                       seed: int, pooling: str = "process-medians") -> PairedEstimate:
    """Paired samples taken in several pairs of processes (``groups``: per process pair, baseline and candidate
    per-call times). The pair of processes is the unit of replication: each one's median ratio, then the speedup is
    the median of those, every pair of processes weighing the same. The CI resamples pairs of processes first,
    then ratios within each drawn pair, so an offset that one pair of processes carries (docs/design/protocol.md#pairs-of-processes) widens the CI instead of biasing it unseen, and one pair far from the others moves the
    speedup no further than the next one's median. ``pooling="ratios"`` (protocols 3-4, ``[statistics].pooling``):
    the median of all ratios pooled, where the pairs of processes that ran longest weigh most and the estimate
    follows outlying ones (a CPU A/A read 0.972 pooled and 0.997 by process medians: four of its six pairs of
    processes read 0.99-1.01, two 0.93 and 0.95). One group is :func:`paired_estimate`."""
    if len(groups) == 1:
        return paired_estimate(groups[0][0], groups[0][1], level=level, resamples=resamples, seed=seed)
    ratios = []
    for b, c in groups:
        bb, cc = np.asarray(b, dtype=np.float64), np.asarray(c, dtype=np.float64)
        if bb.shape != cc.shape or bb.size == 0:
            raise ValueError("paired samples must be non-empty and of equal length")
        if np.any(bb <= 0) or np.any(cc <= 0):
            raise ValueError("non-positive sample time: the timer did not advance")
        ratios.append(bb / cc)
    if pooling not in ("process-medians", "ratios"):
        raise ValueError(f"unknown pooling {pooling!r}")

    def centre(rs: Sequence[np.ndarray]) -> float:
        if pooling == "ratios":
            return float(np.median(np.concatenate(rs)))
        return float(np.median([np.median(r) for r in rs]))

    med = centre(ratios)
    rng = np.random.default_rng(seed)
    g = len(ratios)
    meds = np.empty(resamples)
    for i in range(resamples):
        drawn = [ratios[j] for j in rng.integers(0, g, size=g)]
        meds[i] = centre([r[rng.integers(0, r.size, size=r.size)] for r in drawn])
    alpha = (1.0 - level) / 2.0
    lo, hi = (float(v) for v in np.quantile(meds, [alpha, 1.0 - alpha]))
    base = np.concatenate([np.asarray(b, dtype=np.float64) for b, _ in groups])
    cand = np.concatenate([np.asarray(c, dtype=np.float64) for _, c in groups])
    return PairedEstimate(n_pairs=int(sum(r.size for r in ratios)), speedup=med, ci_low=min(lo, med),
                          ci_high=max(hi, med), baseline_s=float(np.median(base)), candidate_s=float(np.median(cand)))


def with_process_offsets(est: PairedEstimate, offset_sd: float, n_processes: int, level: float) -> PairedEstimate:
    """The CI of ``est`` widened by a between-process variance component the device's protocol states
    (``[devices.cpu].process_offset_sd``: the standard deviation, on the log scale, of the offset one pair of
    processes carries). Two pairs of processes give that component one degree of freedom: their bootstrap can read
    narrow because the two happened to agree (the short-call A/A under protocol 8: 11 of 14 CIs held 1.0). The
    component's share, ``z * offset_sd / sqrt(n_processes)``, is added in quadrature to each side of the CI on the
    log scale; the point estimate does not move. ``offset_sd`` 0: ``est`` as it is."""
    if offset_sd <= 0 or n_processes < 1 or est.speedup <= 0:
        return est
    z = NormalDist().inv_cdf(0.5 + level / 2.0)
    extra = z * offset_sd / math.sqrt(n_processes)
    centre = math.log(est.speedup)
    lo = centre - math.hypot(centre - math.log(est.ci_low), extra) if est.ci_low > 0 else -math.inf
    hi = centre + math.hypot(math.log(est.ci_high) - centre, extra)
    return replace(est, ci_low=math.exp(lo), ci_high=math.exp(hi))

