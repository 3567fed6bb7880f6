"""Benchmarks of the harness itself (not tests): A/A bias, re-measure deviation, per-item overhead.

    python benchmarks/harness/bench_harness.py aa --repeats 3            # A/A items of the bundled suite
    python benchmarks/harness/bench_harness.py remeasure --repeats 3     # the suite measured several times
    python benchmarks/harness/bench_harness.py overhead                  # where an item's wall time goes
    python benchmarks/harness/bench_harness.py all --repeats 3 --out docs/harness-data.json
    python benchmarks/harness/bench_harness.py aa --repeats 2 --ref 9bb0e46 -- --problems=benchmarks/harness/short_calls
    python benchmarks/harness/bench_harness.py aa --repeats 1 --partial /tmp/aa -- benchmarks/kernels/anchors   # items as they finish

Each repeat is a fresh `pytest --autotune` session (its own nonce, zygote and sandboxes) on the bundled suite,
so the numbers include everything a user's run includes. Extra pytest arguments go after `--`, e.g.
`-- --device=cuda` or `-- -k "softmax or relu"`. Results are printed as Markdown tables and, with --out, saved.
``--ref REF`` runs the same sessions with the harness as it was at git ref REF as well (a temporary worktree),
so a change to the harness is measured before and after, on the same problems, on the same machine.
``benchmarks/harness/short_calls/`` holds KernelBench-sized elementwise problems (16 x 16384): short calls, where
an asymmetry of a few microseconds per call shows.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


#: the harness under test: this checkout, or a worktree of an older ref (``--ref``)
HARNESS = {"root": REPO}
#: ``--partial DIR``: where each session appends its finished items (None: only the final report)
PARTIAL: dict = {"dir": None}


def run_session(extra: list[str], workdir: Path, tag: str) -> tuple[dict, float]:
    rep = workdir / f"{tag}.json"
    db = workdir / f"{tag}.db"
    root = HARNESS["root"]
    # problem folders given relative to this checkout stay the same files when an older harness runs them
    extra = [f"--problems={(REPO / a.split('=', 1)[1]).resolve()}" if a.startswith("--problems=") else a
             for a in extra]
    cmd = [sys.executable, "-m", "pytest", "--autotune", f"--autotune-json={rep}", f"--autotune-db={db}",
           "-q", "-p", "no:cacheprovider", *extra]
    # the harness under test first; what the caller's PYTHONPATH held (e.g. wheels staged on a GPU host) after it
    paths = [str(root), os.environ.get("PYTHONPATH")]
    env = dict(os.environ)
    if PARTIAL["dir"] is not None:
        # each finished item appended as one JSON line as it finishes (benchmarks/harness/gpu/harness_plugin.py):
        # a session cut short by a timeout still leaves what it measured
        PARTIAL["dir"].mkdir(parents=True, exist_ok=True)
        cmd += ["-p", "harness_plugin"]
        paths.insert(1, str(REPO / "benchmarks" / "harness" / "gpu"))
        env["AUTOTUNE_PARTIAL"] = str(PARTIAL["dir"] / f"{HARNESS.get('tag', 'now')}-{tag}.partial.jsonl")
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    if not rep.exists():
        sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-4000:])
        raise SystemExit(f"session {tag} wrote no report (exit {proc.returncode})")
    return json.loads(rep.read_text()), wall


def aa(repeats: int, extra: list[str], workdir: Path) -> dict:
    workdir.mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(repeats):
        r, wall = run_session(["--autotune-aa", "-k", "reference-aa", *extra], workdir, f"aa{i}")
        for it in r["items"]:
            if it["verdict"] == "accepted":
                pairs = (((it.get("details") or {}).get("timing") or {}).get("calibration") or {}).get(
                    "process_pairs") or []
                rows.append({"repeat": i, "problem": it["problem"], "speedup": it["speedup"], "ci": it["ci"],
                             "n_pairs": it["n_pairs"], "baseline_s": it["baseline_s"],
                             "cause": None if it["ci"][0] <= 1.0 <= it["ci"][1] else miss_cause(it),
                             # each pair of processes on its own: its speedup, CI and calls per sample
                             "process_pairs": [{"speedup": p.get("speedup"), "ci": p.get("ci"),
                                                "k": p.get("calls_per_sample")} for p in pairs]})
            else:
                rows.append({"repeat": i, "problem": it["problem"], "verdict": it["verdict"], "gate": it["gate"],
                             "reason": it["reason"][:200]})
    ok = [x for x in rows if "speedup" in x]
    logs = [math.log(x["speedup"]) for x in ok]
    covered = [x["ci"][0] <= 1.0 <= x["ci"][1] for x in ok]
    return {
        "items": rows,
        "n": len(ok),
        "refused": len(rows) - len(ok),
        "median_aa": statistics.median(x["speedup"] for x in ok) if ok else None,
        "geomean_aa": math.exp(statistics.fmean(logs)) if logs else None,
        "median_abs_log_dev": statistics.median(abs(v) for v in logs) if logs else None,
        "max_abs_dev": max(abs(x["speedup"] - 1) for x in ok) if ok else None,
        "ci_covers_one": sum(covered) / len(covered) if covered else None,
        "median_ci_width": statistics.median((x["ci"][1] - x["ci"][0]) / x["speedup"] for x in ok) if ok else None,
        **_between_pairs(ok),
    }


def miss_cause(it: dict) -> str:
    """Why an A/A item's CI misses 1.0, from what its report says: the pairs of processes (one pair's offset, which
    two pairs cannot average out), page faults inside samples, a re-planned k, CPU used while idle, or the arms' own
    per-call times. The first of these that the report shows, or every fact when none stands out."""
    t = (it.get("details") or {}).get("timing") or {}
    cal = t.get("calibration") or {}
    pairs = [p for p in cal.get("process_pairs") or [] if p.get("speedup") and p.get("ci")]
    facts = []
    if len(pairs) >= 2:
        inside = [p["ci"][0] <= 1.0 <= p["ci"][1] for p in pairs]
        desc = ", ".join(f"{p['speedup']:.3f} [{p['ci'][0]:.3f}, {p['ci'][1]:.3f}]" for p in pairs)
        if any(inside) and not all(inside):
            return f"one pair of processes carries an offset: the pairs read {desc}"
        if not any(inside):
            sides = {p["ci"][0] > 1.0 for p in pairs}
            if len(sides) == 1:
                per_call = t.get("per_call_s") or {}
                calls = (f" (a call: A {per_call['A'] * 1e6:.1f} us, B {per_call['B'] * 1e6:.1f} us)"
                         if per_call.get("A") and per_call.get("B") else "")
                facts.append(f"an offset per process larger than the protocol's floor "
                             f"([devices.cpu].process_offset_sd), the same side in every pair: the same code runs at "
                             f"two speeds in the two arms' processes{calls}, and {len(pairs)} pairs of processes "
                             f"cannot average it out; the pairs read {desc}")
            else:
                facts.append(f"every pair of processes misses 1.0 on its own, on both sides: {desc}")
    faults = t.get("samples_with_page_faults") or {}
    if faults and faults.get("A") != faults.get("B") and max(faults.values()) > 2:
        return f"page faults inside samples: {faults} samples of each arm took some"
    if cal.get("replanned"):
        return f"k re-planned mid-item: {cal['replanned']}"
    cpu = t.get("cpu") or {}
    idle = {arm: (cpu.get(arm) or {}).get("idle_s") for arm in ("A", "B")}
    if any(v for v in idle.values()):
        facts.append(f"CPU used while idle: {idle}")
    facts.append(f"per call: {t.get('per_call_s')}, k = {t.get('calls_per_sample')}")
    return "; ".join(facts)


def _between_pairs(ok: list[dict]) -> dict:
    """How far the pairs of processes of one item disagree, against how wide each one's own CI is: a spread
    between pairs beyond their CIs is an offset per pair of processes, which only more pairs can average out."""
    spread, half_widths, disjoint = [], [], 0
    for x in ok:
        ps = [p for p in x.get("process_pairs", []) if p.get("speedup") and p.get("ci")]
        if len(ps) < 2:
            continue
        logs = [math.log(p["speedup"]) for p in ps]
        spread.append(max(logs) - min(logs))
        half_widths += [(p["ci"][1] - p["ci"][0]) / 2 / p["speedup"] for p in ps]
        disjoint += max(p["ci"][0] for p in ps) > min(p["ci"][1] for p in ps)
    if not spread:
        return {}
    return {"median_between_pair_log_spread": statistics.median(spread),
            "median_pair_ci_half_width": statistics.median(half_widths),
            "items_with_disjoint_pair_cis": disjoint, "items_with_pairs": len(spread)}


def remeasure(repeats: int, extra: list[str], workdir: Path) -> dict:
    runs = []
    for i in range(repeats):
        r, wall = run_session(extra, workdir, f"rm{i}")
        runs.append({(it["problem"], it["candidate"]): it for it in r["items"]})
    keys = sorted(set.intersection(*[set(k for k, v in run.items() if v["verdict"] == "accepted") for run in runs]))
    per_item = []
    for k in keys:
        s = [run[k]["speedup"] for run in runs]
        cis = [run[k]["ci"] for run in runs]
        pairwise = [abs(math.log(a / b)) for i, a in enumerate(s) for b in s[i + 1:]]
        overlap = max(c[0] for c in cis) <= min(c[1] for c in cis)
        per_item.append({"problem": k[0], "candidate": k[1], "speedups": s, "max_abs_log_dev": max(pairwise),
                         "cis_overlap": overlap})
    verdicts_equal = all(
        {k: (v["verdict"], v["gate"]) for k, v in runs[0].items()} == {k: (v["verdict"], v["gate"]) for k, v in r.items()}
        for r in runs[1:])
    devs = [abs(math.log(a / b)) for it in per_item for i, a in enumerate(it["speedups"]) for b in it["speedups"][i + 1:]]
    return {
        "items": per_item,
        "n_items": len(per_item),
        "same_verdicts": verdicts_equal,
        "median_rel_dev": (math.exp(statistics.median(devs)) - 1) if devs else None,
        "p90_rel_dev": (math.exp(sorted(devs)[int(0.9 * (len(devs) - 1))]) - 1) if devs else None,
        "max_rel_dev": (math.exp(max(devs)) - 1) if devs else None,
        "cis_overlap_fraction": (sum(it["cis_overlap"] for it in per_item) / len(per_item)) if per_item else None,
    }


def overhead(extra: list[str], workdir: Path) -> dict:
    r, wall = run_session(extra, workdir, "ovh")
    items = []
    for it in r["items"]:
        d = it.get("details") or {}
        st = d.get("stage_seconds") or {}
        tm = d.get("timing") or {}
        items.append({"problem": it["problem"], "candidate": it["candidate"], "verdict": it["verdict"],
                      "item_s": d.get("item_seconds"), "stages": st,
                      "timed_rounds_s": tm.get("timing_s"), "samples_s": tm.get("timed_s"),
                      "duty_cycle": d.get("duty_cycle"), "calls_per_sample": tm.get("calls_per_sample"),
                      "n_pairs": it.get("n_pairs")})
    total_items = sum(x["item_s"] or 0 for x in items)
    total_samples = sum(x["samples_s"] or 0 for x in items)
    return {"session_wall_s": wall, "items": items, "sum_item_s": total_items, "sum_samples_s": total_samples,
            "timed_fraction": (total_samples / total_items) if total_items else None,
            "per_item_overhead_s": ((total_items - total_samples) / len(items)) if items else None}


def md_aa(a: dict) -> str:
    f = lambda v, p=3: "-" if v is None else f"{v:.{p}f}"  # noqa: E731
    return (f"| A/A items | median A/A | geomean A/A | median abs log dev | max abs dev | CI covers 1.0 | median CI width | refused |\n"
            f"|---|---|---|---|---|---|---|---|\n"
            f"| {a['n']} | {f(a['median_aa'], 4)} | {f(a['geomean_aa'], 4)} | {f(a['median_abs_log_dev'], 4)} | "
            f"{f(a['max_abs_dev'])} | {f(a['ci_covers_one'], 2)} | {f(a['median_ci_width'])} | {a['refused']} |\n"
            + ("" if "items_with_pairs" not in a else
               f"\nbetween pairs of processes: median log spread {f(a['median_between_pair_log_spread'], 4)}, median "
               f"CI half-width of one pair {f(a['median_pair_ci_half_width'], 4)}, pair CIs disjoint in "
               f"{a['items_with_disjoint_pair_cis']} of {a['items_with_pairs']} items\n")
            + "".join(f"\n- {x['problem']} reads {x['speedup']:.4f} [{x['ci'][0]:.4f}, {x['ci'][1]:.4f}]: {x['cause']}"
                      for x in a["items"] if x.get("cause")))


def md_remeasure(m: dict) -> str:
    f = lambda v: "-" if v is None else f"{100 * v:.1f}%"  # noqa: E731
    lines = ["| problem | candidate | speedups | max deviation | CIs overlap |", "|---|---|---|---|---|"]
    for it in m["items"]:
        lines.append(f"| {it['problem']} | {it['candidate']} | {', '.join(f'{s:.2f}x' for s in it['speedups'])} | "
                     f"{100 * (math.exp(it['max_abs_log_dev']) - 1):.1f}% | {'yes' if it['cis_overlap'] else 'no'} |")
    lines.append("")
    lines.append(f"items {m['n_items']}, same verdicts in every session: {m['same_verdicts']}; speedup deviation "
                 f"between sessions: median {f(m['median_rel_dev'])}, p90 {f(m['p90_rel_dev'])}, max "
                 f"{f(m['max_rel_dev'])}; CIs overlap in {f(m['cis_overlap_fraction'])} of items")
    return "\n".join(lines) + "\n"


def md_overhead(o: dict) -> str:
    lines = ["| problem | candidate | item s | correctness s | probe s | timing s | samples s | duty cycle | k | pairs |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    g = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
    for it in o["items"]:
        st = it["stages"]
        lines.append(f"| {it['problem']} | {it['candidate']} | {g(it['item_s'])} | {g(st.get('correctness'))} | "
                     f"{g(st.get('probe'))} | {g(it['timed_rounds_s'])} | {g(it['samples_s'])} | "
                     f"{g(it['duty_cycle'])} | {it['calls_per_sample']} | {it['n_pairs']} |")
    lines.append("")
    lines.append(f"session wall {o['session_wall_s']:.1f} s; sum of items {o['sum_item_s']:.1f} s, of which timed "
                 f"samples {o['sum_samples_s']:.1f} s ({100 * (o['timed_fraction'] or 0):.0f}%); overhead per item "
                 f"{o['per_item_overhead_s']:.2f} s")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1:]
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=["aa", "remeasure", "overhead", "all"])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--ref", help="also measure the harness as it was at this git ref (before/after)")
    ap.add_argument("--partial", type=Path, help="append each finished item to DIR/<harness>-<session>.partial.jsonl "
                    "as it finishes (a run cut short by a timeout keeps what it measured)")
    a = ap.parse_args(argv)
    PARTIAL["dir"] = a.partial
    workdir = Path(tempfile.mkdtemp(prefix="autotune-harness-"))
    out: dict = {"argv": sys.argv, "extra": extra, "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
                 "host_cpus": os.cpu_count(), "loadavg_before": os.getloadavg(),
                 "git": subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True,
                                       text=True).stdout.strip()}
    if a.ref and a.what == "aa":
        old = workdir / "before"
        subprocess.run(["git", "worktree", "add", "--detach", str(old), a.ref], cwd=REPO, check=True,
                       capture_output=True)
        try:
            HARNESS["root"], HARNESS["tag"] = old, "before"
            out["aa_before"] = aa(a.repeats, extra, workdir / "b")
            out["aa_before"]["ref"] = a.ref
            print(f"## A/A bias, harness at {a.ref} (before)\n\n" + md_aa(out["aa_before"]))
        finally:
            HARNESS["root"], HARNESS["tag"] = REPO, "now"
            subprocess.run(["git", "worktree", "remove", "--force", str(old)], cwd=REPO, capture_output=True)
    if a.what in ("aa", "all"):
        out["aa"] = aa(a.repeats, extra, workdir)
        print("## A/A bias" + (" (after)" if a.ref else "") + "\n\n" + md_aa(out["aa"]))
    if a.what in ("remeasure", "all"):
        out["remeasure"] = remeasure(a.repeats, extra, workdir)
        print("## Re-measure\n\n" + md_remeasure(out["remeasure"]))
    if a.what in ("overhead", "all"):
        out["overhead"] = overhead(extra, workdir)
        print("## Per-item overhead\n\n" + md_overhead(out["overhead"]))
    out["loadavg_after"] = os.getloadavg()
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(out, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
