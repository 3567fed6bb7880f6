"""Where the anchors' ratios and triton's ``do_bench`` differ, per arm and per sample (docs/guide/anchors.md), and where the
head start's time went (docs/results/h200.md, "The head start").

    python3 benchmarks/harness/gpu/anchor_gap.py --pair REPORT.json OUTSIDE.json [--pair ...] [--synced SYNCED.json]
                                                 [--probe HEADSTART.json] [--constant-us 240] [--json OUT.json]

``REPORT.json``: an anchors run's pytest report (``anchors_h200.sh``: ``anchors.json``), read for each anchor's
seconds per call in our samples (``baseline_s``, ``candidate_s``), its calls per sample ``k``
(``details.timing.calls_per_sample``) and, under a protocol with a head start, each arm's ``timing_info``
(``details.timing.mode.sandboxes``: the hold that ran, the first call's host time, the hold's GPU time, expiries).
``OUTSIDE.json``: ``outside_timers.py dobench`` of the same run (``outside.json``): ``do_bench``'s seconds per call
for each arm. A later ``--pair`` replaces an earlier one's anchor. ``--synced``: an ``outside_timers.py dobench
--synced`` file: the same timer with the host waiting for the L2 flush before it launches, i.e. every call launched
onto an idle GPU. ``--probe``: ``head_start_probe.py``'s JSON (the same modules in one process, no sandbox).

Per anchor and arm it prints our extra time per *sample* over ``do_bench``, ``(ours - do_bench) * k``: a cost that
is fixed per sample shows as the same number whatever the call's length and ``k``; a slower kernel would grow with
both. Then the ratio predicted if the candidate's samples carried ``--constant-us`` microseconds less, against
``do_bench``'s (the correction the head start makes unnecessary: with it, compare the measured column). With
head-start data, a second table: per arm, the first call's host time in the sandbox against the probe's outside
it (a sandbox's cold host path shows as the difference, now off the clock), the hold's GPU time and release lag,
and the probe's gap between the release and the first kernel. No GPU needed: it reads the files.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path


def _rows(path: str) -> dict:
    return {r["nodeid"]: r for r in json.loads(Path(path).read_text())["rows"] if "error" not in r}


def _mean(xs: list) -> float:
    return sum(xs) / len(xs)


def gap_table(pairs: list[tuple[str, str]], synced: str | None, constant_s: float) -> list[dict]:
    anchors: dict[str, dict] = {}
    for report, outside in pairs:
        outs = _rows(outside)
        for it in json.loads(Path(report).read_text())["items"]:
            row = outs.get(it["nodeid"])
            if it.get("speedup") is None or row is None or it.get("candidate") == "reference-aa":
                continue  # an A/A yardstick timed in the same session (h100_jobs.sh anchors) is no anchor
            anchors[it["nodeid"]] = {"item": it, "outside": row}
    extra_synced = _rows(synced) if synced else {}
    out = []
    for nodeid, a in sorted(anchors.items(), key=lambda kv: int(kv[1]["item"]["problem"].split("_", 1)[0])):
        it, row = a["item"], a["outside"]
        k = int(it["details"]["timing"]["calls_per_sample"])
        db_base, db_cand = _mean(row["dobench_s"]["base"]), _mean(row["dobench_s"]["cand"])
        ours_base, ours_cand = float(it["baseline_s"]), float(it["candidate_s"])
        srow = extra_synced.get(nodeid) or (row if row.get("synced_s") else None)
        s_cand = _mean(srow["synced_s"]["cand"]) if srow and srow.get("synced_s") else None
        s_base = _mean(srow["synced_s"]["base"]) if srow and srow.get("synced_s") else None
        predicted = ours_base / (ours_cand - constant_s / k)
        out.append({
            "problem": it["problem"], "verdict": it["verdict"], "k": k, "ours": it["speedup"], "dobench": row["dobench"],
            "ours_vs_dobench": it["speedup"] / row["dobench"] - 1,
            "base_extra_per_sample_s": (ours_base - db_base) * k, "cand_extra_per_sample_s": (ours_cand - db_cand) * k,
            "synced_cand_extra_per_call_s": (s_cand - db_cand) if s_cand else None,
            "synced_base_extra_per_call_s": (s_base - db_base) if s_base else None,
            "predicted": predicted, "predicted_vs_dobench": predicted / row["dobench"] - 1,
            "head_start": _head_start(it),
        })
    return out


def _head_start(item: dict) -> dict:
    """Each arm's head-start facts from its sandbox's timing_info ({} under a protocol without a head start)."""
    boxes = (((item.get("details") or {}).get("timing") or {}).get("mode") or {}).get("sandboxes") or {}
    keys = ("head_start", "head_start_reason", "first_call_s_median", "enqueue_s_median", "hold_s_median",
            "release_lag_s_median", "hold_expiries", "host_bound_samples", "held_samples")
    return {arm: {k: info.get(k) for k in keys} for arm, info in boxes.items() if info.get("head_start_setting")}


def where_it_went(rows: list, probe: dict) -> list[str]:
    us = lambda s: "-" if s is None else f"{s * 1e6:.0f}"  # noqa: E731
    lines = ["| anchor | arm | hold | first call's host, sandbox (µs) | first call's host, outside (µs) | hold, GPU "
             "(µs) | release lag (µs) | gap after release, outside (µs) | expiries | host-bound samples |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        pr = (probe.get("pairs") or {}).get(r["problem"]) or {}
        for arm, side in (("A", "base"), ("B", "cand")):
            hs = r["head_start"].get(arm) or {}
            spin = (pr.get(side) or {}).get("spin") or {}
            lines.append(f"| {r['problem']} | {'eager' if arm == 'A' else 'compiled'} | {hs.get('head_start', '-')} | "
                         f"{us(hs.get('first_call_s_median'))} | {us(spin.get('first_call_seconds'))} | "
                         f"{us(hs.get('hold_s_median'))} | {us(hs.get('release_lag_s_median'))} | "
                         f"{us((spin.get('split') or {}).get('first_call_gap_s'))} | {hs.get('hold_expiries', '-')} | "
                         f"{hs.get('host_bound_samples', '-')} |")
    return lines


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pair", nargs=2, action="append", required=True, metavar=("REPORT", "OUTSIDE"))
    ap.add_argument("--synced")
    ap.add_argument("--probe", help="head_start_probe.py's JSON")
    ap.add_argument("--constant-us", type=float, default=240.0)
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    rows = gap_table([tuple(p) for p in args.pair], args.synced, args.constant_us * 1e-6)
    us = lambda s: "-" if s is None else f"{s * 1e6:.0f}"  # noqa: E731
    print("| anchor | k | ours | do_bench | ours / do_bench | baseline's extra per sample (µs) | compiled's extra "
          f"per sample (µs) | launched onto an idle GPU: compiled's extra per call (µs) | ours less {args.constant_us:.0f}"
          " µs per compiled sample | that / do_bench |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['problem']} | {r['k']} | {r['ours']:.3f} | {r['dobench']:.3f} | {r['ours_vs_dobench']:+.1%} | "
              f"{us(r['base_extra_per_sample_s'])} | {us(r['cand_extra_per_sample_s'])} | "
              f"{us(r['synced_cand_extra_per_call_s'])} | {r['predicted']:.3f} | {r['predicted_vs_dobench']:+.1%} |")
    cand = [r["cand_extra_per_sample_s"] for r in rows]
    if cand:
        print(f"compiled arm's extra per sample: median {statistics.median(cand) * 1e6:.0f} µs, range "
              f"{min(cand) * 1e6:.0f}-{max(cand) * 1e6:.0f} µs over {len(cand)} anchors; within 3% of do_bench: "
              f"{sum(abs(r['ours_vs_dobench']) <= 0.03 for r in rows)} of {len(rows)} as measured (no correction), "
              f"{sum(abs(r['predicted_vs_dobench']) <= 0.03 for r in rows)} with the constant taken out")
    probe = json.loads(Path(args.probe).read_text()) if args.probe and Path(args.probe).is_file() else {}
    if any(r["head_start"] for r in rows) or probe:
        print()
        print("\n".join(where_it_went(rows, probe)))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
