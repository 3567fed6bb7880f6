"""summary.md of an h100_jobs.sh job, from the files it wrote (no GPU needed: it reads them).

    python3 benchmarks/harness/gpu/h100_summary.py anchors WORK_DIR [--expect STEM ...]
    python3 benchmarks/harness/gpu/h100_summary.py kb-l1 WORK_DIR [--expect STEM ...] [--done PARTIAL.jsonl ...]

``anchors``: the A/A yardsticks (ratio, CI, whether it holds 1.0 and is within 0.3%), then every anchor: the plugin's
verdict and ratio, ``k`` and the sample's length (``details.timing.calibration.sample``), ``do_bench`` of the same
modules in the same job and ours / do_bench, and for an item refused for memory the reason and who held the device
(``details.memory_holders``); anchors expected but not reached, with the command that runs them. ``kb-l1``: the
A/A summary of the shard (kb_level1.py summarize), the problems not reached and the command that goes on with them.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path


def _items(work: Path, name: str) -> list[dict]:
    report = work / f"{name}.json"
    if report.is_file():
        try:
            return json.loads(report.read_text())["items"]
        except (ValueError, KeyError):
            pass
    partial = work / f"{name}.partial.jsonl"
    if partial.is_file():
        return [json.loads(line) for line in partial.read_text().splitlines() if line.strip()]
    return []


def _ci(it: dict) -> str:
    ci = it.get("ci") or [None, None]
    if it.get("speedup") is None or ci[0] is None:
        return "-"
    return f"{it['speedup']:.4f} [{ci[0]:.4f}, {ci[1]:.4f}]"


def _sample(it: dict) -> str:
    t = (it.get("details") or {}).get("timing") or {}
    s = (t.get("calibration") or {}).get("sample") or {}
    k = t.get("calls_per_sample")
    if not k:
        return "-"
    base = s.get("baseline_s")
    return f"k = {k}" + (f", {base * 1e3:.1f} ms" if base else "") + (f" (short: {s['short_by']})" if s.get("short_by") else "")


def _holders(it: dict) -> str:
    procs = ((it.get("details") or {}).get("memory_holders") or {}).get("gpu_processes") or []
    procs = sorted((p for p in procs if p.get("bytes")), key=lambda p: -int(p["bytes"]))
    return "; ".join(f"{p.get('role')} {int(p['bytes']) / 2**30:.1f} GiB" for p in procs[:5])


def anchors(work: Path, expect: list[str]) -> list[str]:
    items = _items(work, "anchors")
    outside = {}
    for name in ("outside.json", "outside.json.partial"):
        f = work / name
        if f.is_file():
            outside = {r["nodeid"]: r for r in json.loads(f.read_text()).get("rows", []) if "error" not in r}
            break
    lines = ["# Anchors and A/A yardsticks (h100_jobs.sh anchors)", ""]
    phases = work / "phases.txt"
    if phases.is_file():
        lines += ["```", *phases.read_text().splitlines()[:6], "```", ""]
    aa = [i for i in items if i.get("candidate") == "reference-aa"]
    lines += ["| yardstick | verdict | ratio [95% CI] | |1 - r| | CI holds 1.0 | sample |", "|---|---|---|---|---|---|"]
    for it in aa:
        r, ci = it.get("speedup"), it.get("ci") or [None, None]
        holds = ci[0] is not None and ci[0] <= 1.0 <= ci[1]
        lines.append(f"| {it['problem']} | {it['verdict']} | {_ci(it)} | "
                     f"{abs(1 - r) * 100:.2f}% | {'yes' if holds else 'no'} | {_sample(it)} |" if r else
                     f"| {it['problem']} | {it['verdict']} ({it.get('gate')}) | - | - | - | - |")
    lines += ["", "| anchor | verdict | ours [95% CI] | sample | do_bench | ours / do_bench | memory |",
              "|---|---|---|---|---|---|---|"]
    seen = set()
    within = []
    for it in (i for i in items if i.get("candidate") != "reference-aa"):
        seen.add(it["problem"])
        row = outside.get(it["nodeid"]) or {}
        db = row.get("dobench")
        ours = it.get("speedup")
        gap = f"{(ours / db - 1) * 100:+.1f}%" if ours and db else "-"
        if ours and db:
            within.append(abs(math.log(ours / db)) <= math.log(1.03))
        mem = (it.get("details") or {}).get("memory") or {}
        stages = (it.get("details") or {}).get("memory_stages") or {}
        notes = [f"{len(stages)} stages checked"] if stages else []
        if mem.get("release_between_calls"):
            notes.append("caches given back between calls")
        if it.get("gate") == "memory":
            notes = [f"{(it.get('reason') or '')[:200]} -- held: {_holders(it)}"]
        note = ", ".join(notes)
        verdict = it["verdict"] + (f" ({it.get('gate')})" if it.get("gate") else "")
        lines.append(f"| {it['problem']} | {verdict} | {_ci(it)} | {_sample(it)} | "
                     f"{f'{db:.3f}' if db else '-'} | {gap} | {note} |")
    missing = [s for s in expect if s not in seen and not s.startswith("aa_relu")]
    lines.append("")
    if within:
        lines.append(f"within 3% of do_bench: {sum(within)} of {len(within)} anchors with both numbers")
    oom = [i["problem"] for i in items if i.get("gate") == "memory"]
    lines.append(f"out of memory / does not fit: {', '.join(oom) if oom else 'none'}")
    if missing:
        lines.append(f"not reached in this job: {', '.join(missing)} -- run them with "
                     f"`bash benchmarks/harness/gpu/h100_jobs.sh anchors \"$OUT\" --only \"{' '.join(missing)}\"`")
    return lines


def kb(work: Path, expect: list[str], done: list[str]) -> list[str]:
    items = {}
    for f in [*done, str(work / "kb-l1.partial.jsonl")]:
        p = Path(f)
        if p.is_file():
            for line in p.read_text().splitlines():
                if line.strip():
                    it = json.loads(line)
                    items[it["nodeid"]] = it
    lines = ["# KernelBench Level 1 at published sizes, A/A (h100_jobs.sh kb-l1)", ""]
    md = work / "kb-l1.md"
    if md.is_file():
        lines += md.read_text().splitlines()
    reached = {i["problem"] for i in items.values()}
    missing = [s for s in expect if s not in reached]
    secs = [(i.get("details") or {}).get("item_seconds") for i in items.values()]
    secs = [s for s in secs if s]
    lines.append("")
    if secs:
        lines.append(f"items {len(items)}, median item {statistics.median(secs):.1f} s")
    if missing:
        lines.append(f"not reached ({len(missing)}): {' '.join(missing)} -- go on with them: copy kb-l1.partial.jsonl "
                     "out of results.tgz into the repository (e.g. .kb-done/), copy it to the GPU host, and run the same shard with "
                     "KB_DONE=.kb-done/kb-l1.partial.jsonl")
    return lines


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=("anchors", "kb-l1"))
    ap.add_argument("work")
    ap.add_argument("--expect", nargs="*", default=[])
    ap.add_argument("--done", nargs="*", default=[])
    args = ap.parse_args(argv)
    work = Path(args.work)
    lines = anchors(work, args.expect) if args.mode == "anchors" else kb(work, args.expect, args.done)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
