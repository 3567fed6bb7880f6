"""How noisy are engine items, and where does the noise come from? (docs/guide/engines.md#pairs-and-windows)

Reads JSON reports of engine sessions (``pytest --autotune [--autotune-aa] benchmarks/engines
--autotune-json=R.json``) and prints, per engine item:

* the paired ratio and its CI, and whether the CI covers 1.0 (for A/A items it should, ~95% of the time);
* the spread of log(requests/s) between windows of one launch and between launches of one arm: which of the two
  dominates decides whether more windows or more launch pairs narrow the CI;
* for reports with more launch pairs and windows than the protocol uses, the CI the same data gives with fewer
  (``--subsample L,W`` ...): what a protocol of L launch pairs x W windows would have reported.

    python benchmarks/harness/engine_noise.py r1.json r2.json --subsample 1,8 2,4 2,6 4,3
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from pytest_autotune.measure.stats import paired_estimate  # noqa: E402


def _log_spread(values: list[float]) -> float:
    logs = [math.log(v) for v in values if v > 0]
    return statistics.pstdev(logs) if len(logs) > 1 else 0.0


#: (L, W) -> [(ratio, ci_low, ci_high)] over every A/A item read, for the coverage summary
AA: dict = {}


def analyse(item: dict, subsamples: list[tuple[int, int]], resamples: int) -> list[str]:
    d = item.get("details") or {}
    launches = d.get("launches") or []
    pairs = d.get("pairs") or []
    out = [f"{item['problem']} {item['candidate']}: {item['verdict']}"
           + (f" {item['speedup']:.3f} [{item['ci'][0]:.3f}, {item['ci'][1]:.3f}]"
              f" covers 1.0: {item['ci'][0] <= 1.0 <= item['ci'][1]}" if item.get("speedup") else "")]
    for arm in ("default", "config"):
        meds = [statistics.median(lo["requests_per_s"]) for lo in launches if lo["arm"] == arm and lo["requests_per_s"]]
        within = [_log_spread(lo["requests_per_s"]) for lo in launches if lo["arm"] == arm and lo["requests_per_s"]]
        if meds:
            out.append(f"    {arm:7}: launch medians {[round(m, 2) for m in meds]} req/s; log-sd within a launch "
                       f"{statistics.mean(within):.3f}, between launch medians {_log_spread(meds):.3f}")
    loads = [lo["launch"].get("loadavg_1m") for lo in launches if lo.get("launch")]
    if loads:
        out.append(f"    load average (1 min) at launch start/stop: {loads}")
    by_pair: dict[int, list[dict]] = {}
    for p in pairs:
        by_pair.setdefault(p["pair"], []).append(p)
    for L, W in subsamples:
        if L > len(by_pair) or any(len(v) < W for v in list(by_pair.values())[:L]):
            out.append(f"    subsample {L}x{W}: not enough data ({len(by_pair)} pairs)")
            continue
        chosen = [p for j in sorted(by_pair)[:L] for p in sorted(by_pair[j], key=lambda p: p["window"])[:W]]
        base = [1.0 / p["default_rps"] for p in chosen]
        cand = [1.0 / p["config_rps"] for p in chosen]
        est = paired_estimate(base, cand, level=0.95, resamples=resamples, seed=1)
        if item["candidate"].endswith("-aa"):
            AA.setdefault((L, W), []).append((est.speedup, est.ci_low, est.ci_high))
        out.append(f"    as {L} launch pair(s) x {W} windows: {est.speedup:.3f} [{est.ci_low:.3f}, {est.ci_high:.3f}] "
                   f"width {est.rel_width:.1%}, covers 1.0: {est.ci_low <= 1.0 <= est.ci_high}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("reports", nargs="+", type=Path)
    ap.add_argument("--subsample", nargs="*", default=[], help="L,W pairs: launch pairs x windows per launch")
    ap.add_argument("--resamples", type=int, default=2000)
    args = ap.parse_args(argv)
    subs = [tuple(int(x) for x in s.split(",")) for s in args.subsample]
    for rep in args.reports:
        data = json.loads(rep.read_text())
        print(f"== {rep}")
        for item in data["items"]:
            if item.get("kind") != "engine":
                continue
            for line in analyse(item, subs, args.resamples):  # type: ignore[arg-type]
                print(line)
    if AA:
        print("== A/A summary: launch pairs x windows | items | median ratio | range | CI covers 1.0 | "
              "median CI width")
        for (L, W), xs in sorted(AA.items()):
            cover = sum(1 for _, lo, hi in xs if lo <= 1.0 <= hi)
            print(f"   {L} x {W} | {len(xs)} | {statistics.median(r for r, _, _ in xs):.3f} | "
                  f"{min(r for r, _, _ in xs):.3f}-{max(r for r, _, _ in xs):.3f} | {cover}/{len(xs)} | "
                  f"{statistics.median((hi - lo) / r for r, lo, hi in xs):.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
