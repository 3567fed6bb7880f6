"""Is an A/A item's deviation the offset of each pair of processes, or is part of it shared by both pairs of a
session (an arm's component that no placement of processes reaches)? (docs/results/cpu-2026-12-03.md#what-the-per-process-offset-is-not-code-numa-a-shared-component-large-blocks-from-the-heap-2026-12-03-dfbd585)

    python3 benchmarks/harness/aa_pair_correlation.py docs/data/cpu-settle-vm-2026-12-03/bench-aa-*.json

Reads A/A reports of either kind: ``bench_harness.py aa --out`` files (``aa.items[].process_pairs``) and
``--autotune-json`` reports (``items[].details.timing.calibration.process_pairs``). For every item with two pairs of
processes it takes log(speedup) of each pair. With only offsets of the pairs, the two are independent across items
(correlation ~0); a component shared within a session makes them correlate, and their covariance is its variance.
"""

from __future__ import annotations

import json
import math
import statistics as S
import sys


def pairs_of(path: str) -> list[tuple[float, float]]:
    d = json.load(open(path))
    items = d["aa"]["items"] if "aa" in d else d.get("items", [])
    out = []
    for it in items:
        pp = it.get("process_pairs")
        if pp is None:
            pp = (it.get("details", {}).get("timing", {}).get("calibration", {}) or {}).get("process_pairs", [])
        got = [p["speedup"] for p in pp if p.get("speedup")]
        if len(got) == 2:
            out.append((math.log(got[0]), math.log(got[1])))
    return out


def main(paths: list[str]) -> int:
    xs: list[float] = []
    ys: list[float] = []
    for p in paths:
        for a, b in pairs_of(p):
            xs.append(a)
            ys.append(b)
    n = len(xs)
    if n < 3:
        print("fewer than 3 items with two pairs of processes", file=sys.stderr)
        return 2
    r = S.correlation(xs, ys)
    cov = S.covariance(xs, ys)
    total = S.variance(xs + ys)
    # r's 95% interval (Fisher's z)
    z, half = math.atanh(r), 1.96 / math.sqrt(n - 3)
    print(f"{len(paths)} report(s), {n} items with two pairs of processes")
    print(f"correlation of the two pairs' log speedups: {r:+.3f} (95% interval {math.tanh(z - half):+.3f} to "
          f"{math.tanh(z + half):+.3f})")
    print(f"sd of one pair's log speedup {math.sqrt(total) * 100:.2f}%; shared by both pairs (sd from the covariance) "
          f"{math.sqrt(max(cov, 0.0)) * 100:.2f}%; the pair's own {math.sqrt(max(total - cov, 0.0)) * 100:.2f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
