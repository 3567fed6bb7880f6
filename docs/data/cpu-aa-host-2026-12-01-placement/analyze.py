"""Analyse aa-<variant>.txt raw sample files (branch aa-exp's records): per item, the A/A ratio (median over pairs
of baseline/candidate seconds), per-arm medians, how often each arm built its round on the samples' CPU, minor
page faults a sample, and per-position medians (A0 = the baseline at position 0 of its round).

    python3 analyze.py call3/aa-*.txt
"""

import collections
import math
import statistics
import sys
from pathlib import Path


def on_sample_cpu(xs: list) -> float:
    return sum(1 for x in xs if x[3] == x[4]) / len(xs)


def main(paths: list[str]) -> None:
    for f in paths:
        rows = [line.split() for line in open(f)]
        by_item = collections.defaultdict(list)
        for r in rows:
            by_item[r[0]].append(r)
        print(f"== {Path(f).name}: {len(by_item)} items, {len(rows)} samples")
        ratios = []
        for item, rs in by_item.items():
            # (arm, group, seconds, prepare CPU, sample CPU, minor faults, pid)
            seq = [(r[1], r[3], float(r[8]), int(r[6]), int(r[7]), int(r[5]), r[2]) for r in rs]
            pairs = []
            for i in range(0, len(seq) - 3, 4):  # a round: four samples, ABBA or BAAB, groups p1 p1 p2 p2
                block = seq[i:i + 4]
                for g in ("p1", "p2"):
                    a = [x for x in block if x[1] == g and x[0] == "A"]
                    b = [x for x in block if x[1] == g and x[0] == "B"]
                    if a and b:
                        pairs.append(a[0][2] / b[0][2])
            med = statistics.median(pairs)
            ratios.append(med)
            arm_a = [x for x in seq if x[0] == "A"]
            arm_b = [x for x in seq if x[0] == "B"]
            pos = collections.defaultdict(list)
            for j, x in enumerate(seq):
                pos[(x[0], j % 4)].append(x[2])
            posm = " ".join(f"{a}{p}:{statistics.median(pos[(a, p)]) * 1e3:.3f}" for a in "AB" for p in range(4)
                            if pos[(a, p)])
            print(f"  {item:28s} A/B {med:.4f} n={len(pairs):3d}  A {statistics.median(x[2] for x in arm_a) * 1e3:.3f}"
                  f" B {statistics.median(x[2] for x in arm_b) * 1e3:.3f} ms  prep-on-sample-cpu"
                  f" A {on_sample_cpu(arm_a):.2f} B {on_sample_cpu(arm_b):.2f}  faults"
                  f" A {statistics.mean(x[5] for x in arm_a):.1f} B {statistics.mean(x[5] for x in arm_b):.1f}  {posm}")
        print(f"  median A/B {statistics.median(ratios):.4f}  above 1: {sum(r > 1 for r in ratios)}/{len(ratios)}"
              f"  geomean {math.exp(statistics.mean(math.log(r) for r in ratios)):.4f}")


if __name__ == "__main__":
    main(sys.argv[1:])
