"""Summarise run_h200.sh measurements: suite speedups with CIs, item times and duty cycles, A/A bias against the
acceptance bars, re-measure agreement, do_bench agreement, the xdist multi-GPU check. Reads the JSON reports (or,
for a call cut short, the items it finished: NAME.partial.jsonl) under DIR; writes DIR/summary-RUN1.json and .md
and prints a compact table.

    python3 benchmarks/harness/gpu/summarize.py DIR RUN1 [RUN2]     # e.g. DIR run1 run2 (re-measure)
"""

from __future__ import annotations

import csv
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any, Optional


def _load(p: Path) -> Optional[dict]:
    try:
        return json.loads(p.read_text())
    except (OSError, ValueError):
        return None


#: acceptance bars of the GPU leg (docs/results/h200.md)
AA_BARS = {"aa_relu_130us": {"max_dev": 0.003, "max_ci_width": 0.01},
           "aa_relu_4us": {"max_dev": 0.003, "max_ci_width": 0.03}}
DOBENCH_BAR = 0.02
MEDIAN_ITEM_S_BAR = 15.0


def _report(out: Path, name: Optional[str]) -> Optional[dict]:
    """The JSON report, or -- for a run cut short before it wrote one -- the items it finished
    (harness_plugin.py's partial file)."""
    if not name:
        return None
    rep = _load(out / f"{name}.json")
    if rep is not None:
        return rep
    part = out / f"{name}.partial.jsonl"
    if not part.exists():
        return None
    items = [json.loads(line) for line in part.read_text().splitlines() if line.strip()]
    return {"items": items, "run": {}, "partial": True}


def _items(report: Optional[dict]) -> dict[str, dict]:
    return {it["nodeid"]: it for it in (report or {}).get("items", [])}


def _is_aa(it: dict) -> bool:
    return it.get("candidate") == "reference-aa"


def _fmt(x: Optional[float], nd: int = 3) -> str:
    return "-" if x is None else f"{x:.{nd}f}"


def _head_start(it: dict) -> dict:
    """Each arm's head start, from its timing sandbox's timing_info (after configure: its calibration's samples)."""
    boxes = ((((it.get("details") or {}).get("timing") or {}).get("mode") or {}).get("sandboxes") or {})
    return {arm: {k: b.get(k) for k in ("head_start", "head_start_reason", "first_call_s_median", "hold_s_median",
                                          "hold_expiries", "host_bound_samples")}
            for arm, b in boxes.items() if b.get("head_start_setting")}


def summarize(out: Path, name1: str, name2: Optional[str] = None) -> dict[str, Any]:
    run1 = _report(out, name1)
    run2 = _report(out, name2)
    # do_bench of this run's own pairs: dobench-<name>.json (remeasure), else dobench.json (full, run 1)
    db = _load(out / f"dobench-{name1}.json") or (_load(out / "dobench.json") if name1 == "run1" else None) or {}
    naive = _load(out / "naive.json") or {}
    mode = _load(out / "mode.json") or {}
    s: dict[str, Any] = {"device": ((run1 or {}).get("run") or {}).get("device_fingerprint"),
                         "partial": {"run1": bool((run1 or {}).get("partial")), "run2": bool((run2 or {}).get("partial"))}}
    i1, i2 = _items(run1), _items(run2)
    dbrows = {r["nodeid"]: r for r in db.get("rows", []) if "error" not in r}

    # suite table (run 1, candidates only) + re-measure + do_bench per row
    suite = []
    for nid, it in sorted(i1.items()):
        if _is_aa(it):
            continue
        row = {"nodeid": nid, "problem": it["problem"], "candidate": it["candidate"], "verdict": it["verdict"],
               "gate": it.get("gate"), "baseline": it.get("baseline"), "speedup": it.get("speedup"),
               "ci": it.get("ci"), "n_pairs": it.get("n_pairs"), "baseline_s": it.get("baseline_s"),
               "candidate_s": it.get("candidate_s"), "reason": (it.get("reason") or "")[:300],
               "item_seconds": (it.get("details") or {}).get("item_seconds"),
               "duty_cycle": (it.get("details") or {}).get("duty_cycle"),
               "stage_seconds": (it.get("details") or {}).get("stage_seconds"),
               "calls_per_sample": ((it.get("details") or {}).get("timing") or {}).get("calls_per_sample"),
               "mode": ((((it.get("details") or {}).get("timing") or {}).get("mode") or {}).get("decision") or {})
               .get("reason")}
        row["head_start"] = _head_start(it)
        r2 = i2.get(nid)
        if r2 is not None:
            row["speedup2"], row["ci2"], row["verdict2"] = r2.get("speedup"), r2.get("ci"), r2.get("verdict")
        if nid in dbrows:
            row["dobench"] = dbrows[nid]["dobench"]
            row["dobench_rot"] = dbrows[nid].get("dobench_rot")
            row["dobench_pinned"] = dbrows[nid].get("dobench_pinned")
            row["dobench_synced"] = dbrows[nid].get("dobench_synced")
        suite.append(row)
    s["suite"] = suite
    times = [(it.get("details") or {}).get("item_seconds") for it in i1.values()]
    times = [t for t in times if t]
    duty = [(it.get("details") or {}).get("duty_cycle") for it in i1.values()]
    duty = [d for d in duty if d is not None]
    s["items"] = {"n": len(i1), "sum_item_s": sum(times), "median_item_s": statistics.median(times) if times else None,
                  "max_item_s": max(times) if times else None,
                  "median_duty_cycle": statistics.median(duty) if duty else None,
                  "median_item_bar": MEDIAN_ITEM_S_BAR}

    # re-measure agreement
    pairs = [(r["speedup"], r["speedup2"]) for r in suite
             if r.get("speedup") and r.get("speedup2") and r["verdict"] == "accepted" and r.get("verdict2") == "accepted"]
    pairs += [(it["speedup"], i2[n]["speedup"]) for n, it in i1.items()
              if _is_aa(it) and n in i2 and it.get("speedup") and i2[n].get("speedup")]
    if pairs:
        d = [abs(math.log(a / b)) for a, b in pairs]
        s["remeasure"] = {"n": len(d), "median_abs_log_ratio": statistics.median(d), "max_abs_log_ratio": max(d),
                          "median_deviation_pct": 100 * (math.exp(statistics.median(d)) - 1)}

    # A/A bias: ours (items) and naive (back to back)
    aa = []
    for nid, it in sorted(i1.items()):
        if not _is_aa(it):
            continue
        ci = it.get("ci") or [None, None]
        sp = it.get("speedup")
        bar = AA_BARS.get(it["problem"])
        width = (ci[1] - ci[0]) / sp if sp and ci[0] is not None else None
        aa.append({"problem": it["problem"], "verdict": it["verdict"], "speedup": sp, "ci": ci, "ci_rel_width": width,
                   "ci_contains_1": bool(ci[0] is not None and ci[0] <= 1.0 <= ci[1]),
                   "meets_bar": (None if bar is None or sp is None or width is None else
                                 abs(1 - sp) <= bar["max_dev"] and width <= bar["max_ci_width"]
                                 and ci[0] <= 1.0 <= ci[1]),
                   "speedup_run2": (i2.get(nid) or {}).get("speedup"), "n_pairs": it.get("n_pairs"),
                   "per_call_s": it.get("baseline_s"), "reason": (it.get("reason") or "")[:200]})
    s["aa"] = aa
    got = [a["speedup"] for a in aa if a["speedup"]]
    if got:
        logs = [math.log(x) for x in got]
        s["aa_summary"] = {"n": len(got), "median": statistics.median(got), "min": min(got), "max": max(got),
                           "median_abs_log": statistics.median(abs(v) for v in logs),
                           "ci_contains_1": sum(1 for a in aa if a["ci_contains_1"])}
    s["naive"] = naive.get("problems")
    s["mode"] = mode.get("problems")

    # do_bench agreement (candidates and A/A)
    if db.get("rows"):
        good = [r for r in db["rows"] if "error" not in r]
        cand = [r for r in good if r.get("candidate") != "reference-aa"]
        s["dobench"] = {
            "timer": db.get("timer"), "n": len(good), "errors": [r for r in db["rows"] if "error" in r],
            "max_abs_log_ratio": max(r["abs_log_ratio"] for r in cand) if cand else None, "bar": DOBENCH_BAR,
            "aa": {r["problem"]: r["dobench"] for r in good if r.get("candidate") == "reference-aa"},
        }
        # do_bench as it is (""), on rotating input sets, with its main thread on the harness's sample CPU
        # (--pin-main), and with the host waiting for the flush before launching (--synced: no head start)
        for variant in ("", "_rot", "_pinned", "_synced"):
            logs = [r[f"abs_log_ratio{variant}"] for r in cand if r.get(f"abs_log_ratio{variant}") is not None]
            s["dobench"][f"within_bar{variant}"] = sum(1 for v in logs if v <= math.log1p(DOBENCH_BAR))
            s["dobench"][f"median_abs_log_ratio{variant}"] = statistics.median(logs) if logs else None

    # xdist multi-GPU check
    workers = []
    for p in sorted((out / "xdist").glob("worker-*.json")) if (out / "xdist").is_dir() else []:
        w = _load(p)
        if w:
            workers.append(w)
    if workers:
        s["xdist"] = {"workers": workers}
    apps = out / "xdist_apps.csv"
    if apps.exists():
        seen: dict[str, set] = {}
        with apps.open() as f:
            for row in csv.reader(f):
                if len(row) >= 2 and row[0].strip().startswith("GPU-"):
                    seen.setdefault(row[0].strip(), set()).add(row[1].strip())
        s.setdefault("xdist", {})["nvidia_smi_compute_apps"] = {k: sorted(v) for k, v in seen.items()}
    return s


def render(s: dict[str, Any]) -> str:
    lines = []
    dev = s.get("device") or {}
    if dev:
        smi = dev.get("nvidia_smi") or {}
        lines.append(f"device: {dev.get('name')} sm_{str(dev.get('capability', '')).replace('.', '')} "
                     f"{dev.get('sms')} SMs, L2 {dev.get('l2_bytes', 0) / 2**20:.0f} MiB, driver {dev.get('driver')}, "
                     f"torch {dev.get('torch')} (CUDA {dev.get('torch_cuda')}), clocks max SM "
                     f"{smi.get('clocks.max.sm')} mem {smi.get('clocks.max.mem')}")
    lines.append("")
    lines.append("| problem | candidate | baseline | verdict | speedup [95% CI] | pairs | k | item s | duty | "
                 "re-measure | do_bench | do_bench rotating | do_bench pinned | flush waited |")
    lines.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in s.get("suite", []):
        ci = r.get("ci") or [None, None]
        sp = f"{_fmt(r.get('speedup'))} [{_fmt(ci[0])}, {_fmt(ci[1])}]" if r.get("speedup") else "-"
        verdict = r["verdict"] + (f" ({r['gate']})" if r.get("gate") else "")
        lines.append(f"| {r['problem']} | {r['candidate']} | {r.get('baseline') or '-'} | {verdict} | {sp} | "
                     f"{r.get('n_pairs') or '-'} | {r.get('calls_per_sample') or '-'} | {_fmt(r.get('item_seconds'), 1)} | "
                     f"{_fmt(r.get('duty_cycle'), 2)} | {_fmt(r.get('speedup2'))} | {_fmt(r.get('dobench'))} | "
                     f"{_fmt(r.get('dobench_rot'))} | {_fmt(r.get('dobench_pinned'))} | {_fmt(r.get('dobench_synced'))} |")
        if r["verdict"] != "accepted":
            lines.append(f"|  | {r['reason'][:180]} |")
    held = [r for r in s.get("suite", []) if r.get("head_start")]
    if held:
        us = lambda v: "-" if v is None else f"{v * 1e6:.0f}"  # noqa: E731
        lines.append("")
        lines.append("| problem | candidate | hold A / B | first call's host A / B (µs) | hold A / B (µs) | expiries A / B "
                     "| host-bound samples A / B |")
        lines.append("|---|---|---|---|---|---|---|")
        for r in held:
            a, b = r["head_start"].get("A") or {}, r["head_start"].get("B") or {}
            lines.append(f"| {r['problem']} | {r['candidate']} | {a.get('head_start')} / {b.get('head_start')} | "
                         f"{us(a.get('first_call_s_median'))} / {us(b.get('first_call_s_median'))} | "
                         f"{us(a.get('hold_s_median'))} / {us(b.get('hold_s_median'))} | {a.get('hold_expiries')} / "
                         f"{b.get('hold_expiries')} | {a.get('host_bound_samples')} / {b.get('host_bound_samples')} |")
    lines.append("")
    lines.append("| A/A problem | ours [95% CI] | CI width | CI has 1 | meets bar | ours run 2 | do_bench A/A | "
                 "naive A/A median (range) |")
    lines.append("|---|---|---|---|---|---|---|---|")
    naive = s.get("naive") or {}
    dbaa = (s.get("dobench") or {}).get("aa", {})
    for a in s.get("aa", []):
        ci = a["ci"] or [None, None]
        nv = naive.get(a["problem"])
        nvs = f"{nv['median']:.4f} ({nv['min']:.4f}-{nv['max']:.4f})" if nv else "-"
        lines.append(f"| {a['problem']} | {_fmt(a['speedup'], 4)} [{_fmt(ci[0], 4)}, {_fmt(ci[1], 4)}] | "
                     f"{_fmt(a.get('ci_rel_width'), 4)} | {'yes' if a['ci_contains_1'] else 'no'} | {a.get('meets_bar')} | "
                     f"{_fmt(a.get('speedup_run2'), 4)} | "
                     f"{_fmt(dbaa.get(a['problem']), 4)} | {nvs} |")
    lines.append("")
    if s.get("items"):
        t = s["items"]
        lines.append(f"items: {t['n']}, sum {_fmt(t['sum_item_s'], 1)} s, median {_fmt(t['median_item_s'], 1)} s "
                     f"(bar {t['median_item_bar']:g} s), max {_fmt(t['max_item_s'], 1)} s; median duty cycle "
                     f"{_fmt(t['median_duty_cycle'], 3)}")
    if s.get("aa_summary"):
        a = s["aa_summary"]
        lines.append(f"A/A (ours): {a['n']} items, median {a['median']:.4f}, range {a['min']:.4f}-{a['max']:.4f}, "
                     f"median |log| {a['median_abs_log']:.4f}, CI contains 1.0 in {a['ci_contains_1']}/{a['n']}")
    if s.get("remeasure"):
        r = s["remeasure"]
        lines.append(f"re-measure (run 1 vs run 2): {r['n']} items, median |log(s1/s2)| {r['median_abs_log_ratio']:.4f} "
                     f"({r['median_deviation_pct']:.2f}%), max {r['max_abs_log_ratio']:.4f}")
    if s.get("dobench"):
        d = s["dobench"]
        lines.append(f"do_bench agreement: {d['n']} pairs, median |log(ours/do_bench)| "
                     f"{_fmt(d['median_abs_log_ratio'], 4)}, max {_fmt(d['max_abs_log_ratio'], 4)}; within "
                     f"{100 * d['bar']:g}%: {d['within_bar']}; rotating inputs: median |log| "
                     f"{_fmt(d.get('median_abs_log_ratio_rot'), 4)}, within {100 * d['bar']:g}%: "
                     f"{d.get('within_bar_rot')}; main thread on the sample CPU: median |log| "
                     f"{_fmt(d.get('median_abs_log_ratio_pinned'), 4)}, within {100 * d['bar']:g}%: "
                     f"{d.get('within_bar_pinned')}; flush waited for: median |log| "
                     f"{_fmt(d.get('median_abs_log_ratio_synced'), 4)}, within {100 * d['bar']:g}%: "
                     f"{d.get('within_bar_synced')}; errors: {len(d['errors'])}")
    for name, m in (s.get("mode") or {}).items():
        lines.append(f"timing mode {name}: {m.get('mode')} (k={m.get('calls_per_sample')}, "
                     f"{(m.get('per_call_s') or 0) * 1e6:.2f} us/call; {m.get('reason')})")
    if s.get("xdist"):
        x = s["xdist"]
        for w in x.get("workers", []):
            lines.append(f"xdist {w['worker']}: autotune device index {w.get('autotune_device_index')}, "
                         f"torch.cuda.current_device() {w.get('torch_current_device')}, {w.get('gpu_uuid')} "
                         f"{w.get('pci_bus_id')}, {len(w.get('items', []))} items")
        for uuid, pids in (x.get("nvidia_smi_compute_apps") or {}).items():
            lines.append(f"xdist nvidia-smi: {uuid} used by {len(pids)} processes")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    out = Path(argv[0])
    name1 = argv[1] if len(argv) > 1 else "run1"
    name2 = argv[2] if len(argv) > 2 else None
    s = summarize(out, name1, name2)
    text = render(s)
    try:
        (out / f"summary-{name1}.json").write_text(json.dumps(s, indent=1, default=str))
        (out / f"summary-{name1}.md").write_text(text + "\n")
    except OSError:  # a read-only folder (fetched results): print only
        pass
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
