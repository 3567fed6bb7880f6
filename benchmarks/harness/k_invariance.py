"""Does an item's speedup move with the calls per sample (``k``)? Every item timed at the protocol's ``k``, at other
``k`` given by ``--autotune-k`` (exploratory sessions), side by side (docs/architecture.md, "The sample's shape").

    python benchmarks/harness/k_invariance.py --out docs/data/DIR                      # the bundled suite
    python benchmarks/harness/k_invariance.py --legs protocol,1,x2,x4 --judged protocol,x2,x4 --out DIR -- --autotune-pairs=6
    python benchmarks/harness/k_invariance.py --legs protocol,1,x4 --out DIR -- -k relu
    python benchmarks/harness/k_invariance.py --out DIR -- --problems=.kb-v0 .kb-v0 --autotune-aa -k reference-aa

Each leg is a fresh ``pytest --autotune`` session over the same items (its own nonce and sandboxes), the legs one
after the other in the order given, repeated ``--repeats`` times. For each item: the speedup and CI at every leg,
the ``k`` it ran, the largest |log| difference between two legs, and whether every two legs agree -- their CIs
overlap, or they are within ``--floor`` (3%) of each other where the CIs are narrower -- over the ``--judged`` legs
(k = 1, a sample of one cold call, is below the protocol's floor of 8 and can be shown without being judged).
Two pairs of processes understate the between-process scatter of some items (an item's pairs can scatter by 10%
on a 2-vCPU VM: docs/guide/precision.md); ``-- --autotune-pairs=6`` gives CIs that see it. Raw reports and a summary
JSON go to ``--out``; the table goes to stdout as Markdown.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_harness import run_session  # noqa: E402


def leg_args(leg: str) -> list[str]:
    """The pytest arguments of one leg: ``protocol`` (the protocol's own k) or an ``--autotune-k`` value."""
    return ["--autotune-exploratory"] if leg == "protocol" else ["--autotune-exploratory", f"--autotune-k={leg}"]


def agree(a: dict, b: dict, floor: float) -> bool:
    """Two measurements of one item agree: CIs overlap, or the speedups are within ``floor`` (relative)."""
    overlap = max(a["ci"][0], b["ci"][0]) <= min(a["ci"][1], b["ci"][1])
    return overlap or abs(math.log(a["speedup"] / b["speedup"])) <= math.log1p(floor)


def compare(legs: list[str], reports: dict[str, list[dict]], floor: float,
            judged: list[str] | None = None) -> list[dict]:
    """Per item (problem, candidate): each leg's measurement and the comparison across the ``judged`` legs (all of
    them by default)."""
    judged = judged or legs
    rows: dict[tuple, dict] = {}
    for leg in legs:
        for rep_i, rep in enumerate(reports[leg]):
            for it in rep["items"]:
                key = (it["problem"], it["candidate"], rep_i)
                row = rows.setdefault(key, {"problem": it["problem"], "candidate": it["candidate"], "repeat": rep_i,
                                            "legs": {}})
                t = (it.get("details") or {}).get("timing") or {}
                row["legs"][leg] = {"verdict": it["verdict"], "gate": it["gate"], "speedup": it.get("speedup"),
                                    "ci": it.get("ci"), "k": t.get("calls_per_sample"),
                                    "per_call_s": t.get("per_call_s"),
                                    "samples_with_page_faults": t.get("samples_with_page_faults"),
                                    "n_pairs": it.get("n_pairs"),
                                    "reason": None if it["verdict"] == "accepted" else (it.get("reason") or "")[:300]}
    out = []
    for row in rows.values():
        ok = [row["legs"][leg] for leg in judged if leg in row["legs"] and row["legs"][leg]["verdict"] == "accepted"]
        logs = [math.log(m["speedup"]) for m in ok]
        row["max_abs_log_diff"] = (max(logs) - min(logs)) if len(logs) >= 2 else None
        row["agree"] = len(ok) == len(judged) and all(agree(a, b, floor) for i, a in enumerate(ok) for b in ok[i + 1:])
        out.append(row)
    return sorted(out, key=lambda r: (r["repeat"], r["problem"], r["candidate"]))


def markdown(legs: list[str], rows: list[dict], judged: list[str] | None = None) -> str:
    judged = judged or legs
    head = "| problem | candidate | " + " | ".join(f"{leg}: speedup [CI] (k)" for leg in legs) + " | max \\|log\\| | agree |"
    lines = [head, "|" + "---|" * (len(legs) + 4)]
    for r in rows:
        cells = []
        for leg in legs:
            m = r["legs"].get(leg)
            if m is None:
                cells.append("—")
            elif m["verdict"] != "accepted":
                cells.append(f"{m['verdict']} ({m['gate']})")
            else:
                cells.append(f"{m['speedup']:.3f} [{m['ci'][0]:.3f}, {m['ci'][1]:.3f}] ({m['k']})")
        d = r["max_abs_log_diff"]
        lines.append(f"| {r['problem']} | {r['candidate']} | " + " | ".join(cells)
                     + f" | {'—' if d is None else f'{100 * d:.1f}%'} | {'yes' if r['agree'] else '**no**'} |")
    diffs = [r["max_abs_log_diff"] for r in rows if r["max_abs_log_diff"] is not None]
    lines.append("")
    lines.append(f"{sum(r['agree'] for r in rows)} of {len(rows)} items agree across {', '.join(judged)}; "
                 + (f"largest |log| difference {100 * max(diffs):.1f}%, median {100 * statistics.median(diffs):.1f}%"
                    if diffs else "no item measured at every leg"))
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--legs", default="protocol,1,x4",
                    help="comma-separated: protocol (the protocol's k) and --autotune-k values (N or xF)")
    ap.add_argument("--judged", default="",
                    help="comma-separated legs the agreement is judged over (default: every leg); the others are shown")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--floor", type=float, default=0.03, help="legs within this relative difference agree anyway")
    ap.add_argument("--out", type=Path, required=True, help="folder for the raw reports and summary.json")
    args, extra = ap.parse_known_args(argv)
    extra = [a for a in extra if a != "--"]
    legs = [x.strip() for x in args.legs.split(",") if x.strip()]
    args.out.mkdir(parents=True, exist_ok=True)
    reports: dict[str, list[dict]] = {leg: [] for leg in legs}
    walls: dict[str, list[float]] = {leg: [] for leg in legs}
    for i in range(args.repeats):
        for leg in legs:
            tag = f"k-{leg.replace('.', '_')}-{i}"
            rep, wall = run_session([*leg_args(leg), *extra], args.out, tag)
            reports[leg].append(rep)
            walls[leg].append(wall)
            print(f"leg {leg} repeat {i}: {len(rep['items'])} items in {wall:.0f} s", file=sys.stderr, flush=True)
    judged = [x.strip() for x in args.judged.split(",") if x.strip()] or legs
    rows = compare(legs, reports, args.floor, judged)
    summary = {"legs": legs, "judged": judged, "floor": args.floor, "extra": extra, "session_wall_s": walls, "items": rows,
               "agree": sum(r["agree"] for r in rows), "n": len(rows)}
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1))
    text = markdown(legs, rows, judged)
    (args.out / "summary.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
