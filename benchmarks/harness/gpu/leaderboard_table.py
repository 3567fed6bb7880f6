"""The table nobody publishes: agents' KernelBench kernels through the gates, beside what was published for them.

    python3 benchmarks/harness/gpu/leaderboard_table.py --published SUITE/published.json \
        --items RUN/lb.partial.jsonl [RUN2/lb.partial.jsonl ...] [--dobench RUN/lb-dobench.json ...] \
        --md lb.md --json lb-summary.json

``--items``: the session's items (JSON report or the harness plugin's partial JSONL: one item a line, later files
win for the same node id). One row per imported candidate: its problem and model, the speedup its source published and
on what GPU, KernelBench's verdict at today's tolerance and at v0's, our verdict with the gate and the contract's
clause, our speedup with its 95% CI, do_bench of the same two modules (accepted items), findings beyond the contract.
A candidate that never ran (the session ended first) is listed as "not run".

``--labels`` (one per ``--items`` file) and ``--dobench-labels`` (one per ``--dobench`` file) name the run each file
comes from (a commit, a job): the table gets a ``run`` column, and an item is compared with a do_bench row of its own
run only -- a table gathered from several runs never sets one run's speedup beside another's do_bench.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any, Optional


def _items(paths: list[Path], labels: Optional[list[str]] = None) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for i, path in enumerate(paths):
        text = path.read_text()
        if path.suffix == ".json":
            rows = json.loads(text).get("items", [])
        else:
            rows = [json.loads(line) for line in text.splitlines() if line.strip()]
        for it in rows:
            out[it["candidate"]] = {**it, "_run": labels[i]} if labels else it
    return out


def _dobench(paths: list[Path], labels: Optional[list[str]] = None,
             items: Optional[dict[str, dict]] = None) -> dict[str, dict[Optional[str], dict]]:
    """do_bench rows by candidate and run (a later file of the same run wins). A row timed in a process where an
    earlier row's candidate had loaded an extension of the same module name timed that candidate's module, not its
    own (Python keeps one extension module per name in a process; outside_timers.py ``processes_for`` since
    2026-12-06): it is kept with ``void`` saying so, and no speedup is compared with it."""
    out: dict[str, dict[Optional[str], dict]] = {}
    for i, path in enumerate(paths):
        loaded: dict[Any, dict[str, str]] = {}  # process -> module name -> the candidate that loaded it
        for row in json.loads(path.read_text()).get("rows", []):
            if "error" in row:
                continue
            it = (items or {}).get(row["candidate"]) or {}
            names = ((it.get("details") or {}).get("build") or {}).get("built") or []
            here = loaded.setdefault(row.get("process"), {})
            shared = [n for n in names if here.get(n, row["candidate"]) != row["candidate"]]
            first = sorted({here[n] for n in shared})
            for n in names:
                here.setdefault(n, row["candidate"])
            row = {**row, "_run": labels[i]} if labels else dict(row)
            if shared:
                row["void"] = (f"do_bench timed {', '.join(first)}'s extension ({', '.join(shared)}): one module per "
                               "name in a process")
            out.setdefault(row["candidate"], {})[row.get("_run")] = row
    return out


def _x(v: Optional[float]) -> str:
    return "-" if v is None else f"{v:.2f}x"


def _ours(it: Optional[dict]) -> tuple[str, str]:
    if it is None:
        return "not run", "-"
    verdict = it["verdict"] + (f" ({it['gate']})" if it.get("gate") else "")
    if it.get("clause"):
        verdict += f": {it['clause']}"
    sp = it.get("speedup")
    ci = it.get("ci") or [None, None]
    speed = "-" if sp is None else f"{sp:.3f}x [{ci[0]:.3f}, {ci[1]:.3f}]"
    return verdict, speed


def _host_bound(it: Optional[dict]) -> Optional[str]:
    """"A/B of n" where the item's samples were host-bound (the sample's time the host's enqueue, longer than the
    GPU's work: a call costs what the host takes to make it), else None."""
    boxes = (((it or {}).get("details") or {}).get("timing") or {}).get("mode", {}).get("sandboxes") or {}
    a, b = boxes.get("A") or {}, boxes.get("B") or {}
    n = (a.get("eager_samples") or 0) + (a.get("graph_samples") or 0)
    ha, hb = a.get("host_bound_samples") or 0, b.get("host_bound_samples") or 0
    return f"{ha}/{hb} of {n}" if n and (ha or hb) else None


def rows(published: dict, items: dict[str, dict],
         dobench: dict[str, dict[Optional[str], dict]]) -> list[dict[str, Any]]:
    out = []
    for cand in sorted(published["candidates"], key=lambda c: (c.get("problem", ""), c["name"])):
        name, pub = cand["name"], {**cand.get("published", {}), "problem": cand.get("problem"),
                                   "model": cand.get("model")}
        it = items.get(name)
        kb = (it or {}).get("kernelbench") or {}
        verdict, speed = _ours(it)
        db = (dobench.get(name) or {}).get((it or {}).get("_run"))  # this speedup's run's do_bench only
        void = (db or {}).get("void")
        if void:
            db = None
        out.append({
            "problem": pub.get("problem"), "candidate": name, "model": pub.get("model"),
            "published": pub.get("speedup"), "hardware": pub.get("hardware"),
            "kernelbench": kb.get("verdict"), "kernelbench_v0": kb.get("verdict_v0"),
            "verdict": (it or {}).get("verdict"), "gate": (it or {}).get("gate"), "clause": (it or {}).get("clause"),
            "ours": verdict, "speedup": (it or {}).get("speedup"), "ci": (it or {}).get("ci"), "ours_text": speed,
            "dobench": db.get("dobench") if db else None,
            "dobench_vs_ours": (db["dobench"] / it["speedup"]) if (db and it and it.get("speedup")) else None,
            "findings": [f["clause"] for f in (it or {}).get("findings") or []],
            "reason": ((it or {}).get("reason") or "")[:300], "run": (it or {}).get("_run"), "dobench_void": void,
            "host_bound": _host_bound(it),
        })
    return out


def _dobench_cell(r: dict) -> str:
    if r.get("dobench_void"):
        return "void (another candidate's module of the same name)"
    cell = _x(r["dobench"])
    if r["dobench"] is not None and r.get("host_bound"):
        cell += f" (ours host-bound: {r['host_bound']})"
    return cell


def markdown(table: list[dict]) -> str:
    runs = any(r.get("run") for r in table)
    lines = ["| problem | model | published (GPU) | KernelBench (v0) | here | our speedup [95% CI] | do_bench | "
             "findings beyond the contract |" + (" run |" if runs else ""),
             "|---|---|---|---|---|---|---|---|" + ("---|" if runs else "")]
    for r in table:
        kb = f"{r['kernelbench'] or '-'} ({r['kernelbench_v0'] or '-'})"
        pub = "-" if r["published"] is None else f"{r['published']:.2f}x ({r['hardware'] or '?'})"
        lines.append(f"| {r['problem']} | {r['model']} | {pub} | {kb} | {r['ours']} | {r['ours_text']} | "
                     f"{_dobench_cell(r)} | {', '.join(r['findings']) or '-'} |" + (f" {r.get('run') or '-'} |"
                                                                                  if runs else ""))
    return "\n".join(lines) + "\n"


def summary(table: list[dict]) -> dict[str, Any]:
    ran = [r for r in table if r["verdict"] is not None]
    acc = [r for r in ran if r["verdict"] == "accepted"]
    gaps = [abs(r["dobench_vs_ours"] - 1) for r in acc if r["dobench_vs_ours"] is not None]
    device_bound = [abs(r["dobench_vs_ours"] - 1) for r in acc if r["dobench_vs_ours"] is not None
                    and not r.get("host_bound")]
    kb_ok = [r for r in ran if r["kernelbench"] == "correct"]
    return {
        "candidates": len(table), "ran": len(ran), "accepted": len(acc),
        "refused": {g: sum(1 for r in ran if r["gate"] == g) for g in sorted({r["gate"] for r in ran if r["gate"]})},
        "clauses": {c: sum(1 for r in ran if r["clause"] == c) for c in sorted({r["clause"] for r in ran
                                                                                 if r["clause"]})},
        "with_findings": sum(1 for r in ran if r["findings"]),
        "kernelbench_correct": len(kb_ok),
        "kernelbench_correct_refused_here": sum(1 for r in kb_ok if r["verdict"] != "accepted"),
        "kernelbench_incorrect_accepted_here": sum(1 for r in ran if r["kernelbench"] == "incorrect"
                                                   and r["verdict"] == "accepted"),
        "dobench_within_3pct": sum(1 for g in gaps if g <= 0.03), "dobench_compared": len(gaps),
        "median_abs_dobench_gap": statistics.median(gaps) if gaps else None,
        "dobench_void": sum(1 for r in acc if r.get("dobench_void")),
        "dobench_compared_device_bound": len(device_bound),
        "dobench_within_1pct_device_bound": sum(1 for g in device_bound if g <= 0.01),
        "dobench_within_3pct_device_bound": sum(1 for g in device_bound if g <= 0.03),
        "host_bound_accepted": sum(1 for r in acc if r.get("host_bound")),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--published", type=Path, required=True)
    ap.add_argument("--items", type=Path, nargs="+", required=True)
    ap.add_argument("--labels", nargs="*", default=None, help="the run of each --items file, in order")
    ap.add_argument("--dobench", type=Path, nargs="*", default=[])
    ap.add_argument("--dobench-labels", nargs="*", default=None, help="the run of each --dobench file, in order")
    ap.add_argument("--md", type=Path, default=None)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    for files, labels, flag in ((args.items, args.labels, "--labels"), (args.dobench, args.dobench_labels,
                                                                         "--dobench-labels")):
        if labels is not None and len(labels) != len(files):
            ap.error(f"{flag}: give one label per file ({len(files)} files, {len(labels)} labels)")
    items = [(p, lab) for p, lab in zip(args.items, args.labels or [""] * len(args.items)) if p.exists()]
    dbs = [(p, lab) for p, lab in zip(args.dobench, args.dobench_labels or [""] * len(args.dobench)) if p.exists()]
    published = json.loads(args.published.read_text())
    by_candidate = _items([p for p, _ in items], [lab for _, lab in items] if args.labels else None)
    table = rows(published, by_candidate,
                 _dobench([p for p, _ in dbs], [lab for _, lab in dbs] if args.dobench_labels else None,
                          by_candidate))
    s = summary(table)
    text = markdown(table)
    print(json.dumps(s, indent=1))
    if args.md:
        args.md.write_text(text)
    if args.json:
        args.json.write_text(json.dumps({"summary": s, "rows": table, "sample": published.get("sample")}, indent=1)
                             + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
