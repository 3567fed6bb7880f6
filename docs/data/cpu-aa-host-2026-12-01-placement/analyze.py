"""Analyse aa-<variant>.txt raw sample files: per item, A/A ratio (median over pairs of A/B), per-arm medians,
where each arm ran its prepare (same CPU as samples or not), first-call faults."""
import collections, statistics, sys, math
from pathlib import Path
for f in sys.argv[1:]:
    rows = [l.split() for l in open(f)]
    by_item = collections.defaultdict(list)
    for r in rows:
        by_item[r[0]].append(r)
    print(f"== {Path(f).name}: {len(by_item)} items, {len(rows)} samples")
    ratios = []
    for item, rs in by_item.items():
        # pairs: within a pid pair, samples of the same group in order -> (A,B) per round-group
        pids = sorted({(r[1], r[2]) for r in rs})
        # pair up consecutive A/B sample of same group: group by (A-pid..), simplest: sequence order
        seq = [(r[1], r[3], float(r[8]), int(r[6]), int(r[7]), int(r[5]), r[2]) for r in rs]
        pr = []
        i = 0
        # each round is 4 consecutive samples: ABBA or BAAB, groups p1,p1,p2,p2
        while i + 3 < len(seq):
            blk = seq[i:i + 4]
            for g in ("p1", "p2"):
                a = [x for x in blk if x[1] == g and x[0] == "A"]
                b = [x for x in blk if x[1] == g and x[0] == "B"]
                if a and b:
                    pr.append(a[0][2] / b[0][2])
            i += 4
        med = statistics.median(pr)
        ratios.append(med)
        A = [x for x in seq if x[0] == "A"]; B = [x for x in seq if x[0] == "B"]
        def same(xs):  # prepare CPU == sample CPU
            return sum(1 for x in xs if x[3] == x[4]) / len(xs)
        pos = collections.defaultdict(list)
        for j, x in enumerate(seq):
            pos[(x[0], j % 4)].append(x[2])
        posm = " ".join(f"{a}{p}:{statistics.median(pos[(a, p)])*1e3:.3f}" for a in "AB" for p in range(4) if pos[(a, p)])
        print(f"  {item:28s} A/B {med:.4f} n={len(pr):3d}  A {statistics.median(x[2] for x in A)*1e3:.3f} B {statistics.median(x[2] for x in B)*1e3:.3f} ms"
              f"  prep-on-sample-cpu A {same(A):.2f} B {same(B):.2f}  faults A {statistics.mean(x[5] for x in A):.1f} B {statistics.mean(x[5] for x in B):.1f}  {posm}")
    print(f"  median A/B {statistics.median(ratios):.4f}  above 1: {sum(r > 1 for r in ratios)}/{len(ratios)}  geomean {math.exp(statistics.mean(math.log(r) for r in ratios)):.4f}")
