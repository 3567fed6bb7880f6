"""One line per ``--autotune-json`` report of an A/A session: how its items' CIs and pairs of processes behave.

    python3 benchmarks/harness/aa_pair_spread.py docs/data/cpu-workers-vm-2026-12-03/*.json

Per report: accepted items, CIs containing 1.0, median and largest |log speedup|, the median and mean |log| between
an item's two pairs of processes (its ``process_pairs``), median CI width (relative) and how many exceed 10%, the
median number of ratios, the median number of worker respawns (the worker-respawn trial's reports of 2026-12-03; 0 elsewhere) and the
most page faults inside one item's samples (both arms).
"""

from __future__ import annotations

import json
import math
import statistics as S
import sys


def summary(path: str) -> str:
    d = json.load(open(path))
    logs, spreads, widths, cover, ratios, resp, faults = [], [], [], 0, [], [], []
    for it in d["items"]:
        if it["verdict"] != "accepted":
            continue
        t = it["details"]["timing"]
        pp = [p["speedup"] for p in t["calibration"].get("process_pairs", []) if p.get("speedup")]
        logs.append(abs(math.log(it["speedup"])))
        if len(pp) == 2:
            spreads.append(abs(math.log(pp[0] / pp[1])))
        lo, hi = it["ci"]
        widths.append((hi - lo) / it["speedup"])
        cover += lo <= 1 <= hi
        ratios.append(it["n_pairs"])
        resp.append(t.get("overhead", {}).get("respawn", {}).get("n", 0))
        faults.append(sum(v for v in t.get("page_faults_in_samples", {}).values() if v > 0))
    n = len(logs)
    return (f"{path}: {n} accepted, CI holds 1.0 in {cover}; median |log| {S.median(logs) * 100:.2f}% (max "
            f"{max(logs) * 100:.1f}%); between its two pairs of processes median {S.median(spreads) * 100:.2f}%, mean "
            f"{S.mean(spreads) * 100:.2f}%; CI width median {S.median(widths) * 100:.1f}%, over 10%: "
            f"{sum(w > 0.10 for w in widths)}; ratios median {S.median(ratios):g}; respawns median {S.median(resp):g}; "
            f"page faults in samples, most in one item {max(faults)}")


if __name__ == "__main__":
    for p in sys.argv[1:]:
        print(summary(p))
