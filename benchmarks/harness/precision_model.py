"""The constants of the precision summary's model (pytest_autotune/report/precision.py, docs/guide/precision.md),
from a simulation of the protocol's own estimator.

Each simulated item has ``n`` pairs of processes; pair j's log speedup is an offset drawn with sd ``--offset``, and
its ``--ratios`` paired log ratios scatter around it so that the pair's median has sampling sd ``--sampling``. The
pairs go through ``measure/stats.py`` ``clustered_estimate`` (pairs of processes resampled, then ratios within) and
``with_process_offsets`` (the protocol's ``[devices.cpu].process_offset_sd``), as ``pool_process_pairs`` does. Per
``n`` it prints the median CI width (log scale), the width at five sixths of the items over the median's
(``SPREAD``), and ``C``: the bootstrap's half-width, less the protocol's term, times sqrt(n) / (z * pair_sd), where
pair_sd = sqrt(offset**2 + sampling**2) is what the summary measures from a run.

    python3 benchmarks/harness/precision_model.py                       # the grid behind C = 1.4, SPREAD = 1.1
    python3 benchmarks/harness/precision_model.py --offset 0.023 --sampling 0.015 --pairs 2 12 40

Seeded: the same arguments print the same numbers. ~1 min per (offset, sampling) on one core.
"""

from __future__ import annotations

import argparse
import math
from statistics import NormalDist

import numpy as np

from pytest_autotune.measure.stats import clustered_estimate, with_process_offsets

GRID = [(0.023, 0.015), (0.035, 0.0165), (0.015, 0.02), (0.01, 0.01), (0.03, 0.03)]


def simulate(offset: float, sampling: float, pairs: int, items: int, ratios: int, protocol_sd: float,
             rng: np.random.Generator) -> np.ndarray:
    sig_r = sampling * math.sqrt(ratios) / 1.2533  # a median of `ratios` normal draws has sd 1.2533 sig_r / sqrt(n)
    widths = []
    for t in range(items):
        groups = []
        for _ in range(pairs):
            lr = rng.normal(0.0, offset) + rng.normal(0.0, sig_r, ratios)
            c = np.full(ratios, 1e-3)
            groups.append((c * np.exp(lr), c))
        est = clustered_estimate(groups, level=0.95, resamples=400, seed=t)
        est = with_process_offsets(est, protocol_sd, pairs, 0.95)
        widths.append(math.log(est.ci_high) - math.log(est.ci_low))
    return np.asarray(widths)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--offset", type=float, default=None, help="sd of a pair of processes' offset (log scale)")
    ap.add_argument("--sampling", type=float, default=None, help="sampling sd of one pair's median (log scale)")
    ap.add_argument("--pairs", type=int, nargs="+", default=[2, 6, 12, 24, 40])
    ap.add_argument("--items", type=int, default=80, help="simulated items per point")
    ap.add_argument("--ratios", type=int, default=36, help="paired ratios a pair of processes (2 s on the 2-vCPU VM)")
    ap.add_argument("--protocol-sd", type=float, default=0.025, help="[devices.cpu].process_offset_sd")
    ap.add_argument("--seed", type=int, default=2)
    a = ap.parse_args()
    grid = GRID if a.offset is None or a.sampling is None else [(a.offset, a.sampling)]
    rng = np.random.default_rng(a.seed)
    z = NormalDist().inv_cdf(0.975)
    print("offset  sampling  pair_sd  pairs  median width  p(5/6)/median  C")
    for offset, sampling in grid:
        pair_sd = math.hypot(offset, sampling)
        for n in a.pairs:
            w = simulate(offset, sampling, n, a.items, a.ratios, a.protocol_sd, rng)
            med = float(np.median(w))
            boot = math.sqrt(max(0.0, (med / 2) ** 2 - (z * a.protocol_sd / math.sqrt(n)) ** 2))
            c = boot * math.sqrt(n) / (z * pair_sd)
            print(f"{offset:6.3f}  {sampling:8.4f}  {pair_sd:7.4f}  {n:5d}  {med:12.4f}  "
                  f"{float(np.quantile(w, 5 / 6)) / med:13.2f}  {c:4.2f}", flush=True)


if __name__ == "__main__":
    main()
