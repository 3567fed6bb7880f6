"""What protocol 10's sample length costs in time, estimated from recorded runs (docs/design/protocol.md, "The
sample's length"): for every timed item of a JSON report (or a partial JSONL file) measured under protocol 9, the
k that protocol 10 would choose from the same baseline calibration and memory bound, and the seconds its timed
samples would take more.

    python3 benchmarks/harness/sample_length_cost.py REPORT.json|PARTIAL.jsonl [...] [--rows]

Two estimates an item, from its timed seconds (``details.timing.timed_s``), its pairs and one warm-up round a pair
of processes: ``same pairs`` -- every pair it ran, each sample k_new / k times longer (an upper bound, cut at
what its budget had left: past ``[devices.cuda].item_budget_s`` no pair starts); ``same precision`` -- a sample of
k calls averages their noise, so an item that ran more than ``min_pairs`` to reach its CI target needs k / k_new
as many (never fewer than ``min_pairs``) at k_new. No GPU needed: it reads the files.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def items_of(path: str) -> list[dict]:
    text = Path(path).read_text()
    if path.endswith(".jsonl"):
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    return json.loads(text)["items"]


def main(argv: list[str] | None = None) -> int:
    from pytest_autotune.measure.sampling import choose_calls_per_sample
    from pytest_autotune.protocol import load_protocol

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("reports", nargs="+")
    ap.add_argument("--rows", action="store_true", help="one line an item")
    args = ap.parse_args(argv)
    plan = load_protocol(REPO / "protocol.toml").timing_plan("cuda")
    old_plan = dataclasses.replace(plan, fast_arm_sample_s=0.0)
    latest: dict[str, dict] = {}
    for path in args.reports:
        for it in items_of(path):
            latest[it.get("nodeid") or it["problem"]] = it
    rows = []
    for it in latest.values():
        d = it.get("details") or {}
        t = d.get("timing") or {}
        cal = t.get("calibration") or {}
        per_call, k = (cal.get("A") or {}).get("per_call_s"), t.get("calls_per_sample")
        if not per_call or not k:
            continue
        cap = cal.get("k_memory_cap")
        k_new = choose_calls_per_sample(per_call, plan, cap)
        pairs = [p.get("n_pairs") or 0 for p in cal.get("process_pairs") or []] or [2 * (t["rounds"] if isinstance(t.get("rounds"), int) else len(t.get("rounds") or []))]
        n, warm = sum(pairs), len(pairs)
        call = float(t.get("timed_s") or 0) / max(1, 2 * n * k)  # both arms' mean call
        warm_extra = 4 * warm * (k_new - k) * call
        left = max(0.0, plan.item_budget_s - float(d.get("timing_stage_s") or 0) + 1.0)
        upper = min(2 * n * (k_new - k) * call + warm_extra, left)
        lower = 2 * (max(plan.min_pairs, n * k / k_new) * k_new - n * k) * call + warm_extra
        rows.append({"problem": it["problem"], "candidate": it.get("candidate"), "k9": k,
                     "k_protocol9": choose_calls_per_sample(per_call, old_plan, cap), "k10": k_new,
                     "baseline_call_us": round(per_call * 1e6, 1), "pairs": n,
                     "extra_same_precision_s": round(max(0.0, min(lower, upper)), 3),
                     "extra_same_pairs_s": round(upper, 3), "item_s": round(float(d.get("item_seconds") or 0), 2)})
    if not rows:
        print("no timed item with a calibration in these files", file=sys.stderr)
        return 2
    if args.rows:
        for r in sorted(rows, key=lambda r: r["problem"]):
            print(json.dumps(r))
    items = [r["item_s"] for r in rows]
    print(f"{len(rows)} items, median {statistics.median(items):.1f} s; k changes in "
          f"{sum(r['k10'] != r['k9'] for r in rows)} (sample target {plan.sample_target_s * 1e3:g} ms, an arm "
          f"{plan.max_speedup:g}x faster {plan.fast_arm_sample_s * 1e3:g} ms)")
    for key in ("extra_same_precision_s", "extra_same_pairs_s"):
        extra = [r[key] for r in rows]
        print(f"  {key[6:-2].replace('_', ' ')}: extra seconds an item median {statistics.median(extra):.2f}, max "
              f"{max(extra):.2f}; median item about {statistics.median([a + b for a, b in zip(items, extra)]):.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
