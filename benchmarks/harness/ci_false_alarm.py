"""False-alarm rate of the CI regression rule (docs/results/ci.md), measured by A/A re-runs.

Runs the same suite K times unchanged (``pytest --autotune --autotune-json=run<i>.json``), then compares every run
with every earlier one with the plugin's own rule (``pytest_autotune.ci.compare``): an item of a later run that the
rule calls a regression against the earlier run is a false alarm, since nothing changed. Prints, per margin, the
runs, pairs of runs, items compared, alarms and the rate; writes it all to OUT/summary.json.

    python benchmarks/harness/ci_false_alarm.py --k 4 --out /tmp/aa-ci -- -k "relu or softmax or norm"
    python benchmarks/harness/ci_false_alarm.py --reuse /tmp/aa-ci      # re-analyse the reports only

Everything after ``--`` goes to pytest (e.g. ``-k`` to restrict the bundled suite, ``--device=cuda``).
"""

from __future__ import annotations

import argparse
import itertools
import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from pytest_autotune.ci.compare import compare_session  # noqa: E402
from pytest_autotune.ci.stored import StoredRun  # noqa: E402
from pytest_autotune.result import ItemOutcome  # noqa: E402


def run_once(i: int, out: Path, pytest_args: list[str]) -> dict:
    path = out / f"run{i}.json"
    cmd = [sys.executable, "-m", "pytest", "--autotune", f"--autotune-json={path}", f"--autotune-db={out / 'aa.db'}",
           "-p", "no:cacheprovider", "-q", *pytest_args]
    t0 = time.perf_counter()
    res = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    (out / f"run{i}.log").write_text(res.stdout + res.stderr)
    print(f"run {i}: exit {res.returncode}, {wall:.0f} s", flush=True)
    return {"run": i, "exit": res.returncode, "wall_s": round(wall, 1)}


def analyse(reports: list[dict], margins: list[float]) -> dict:
    out: dict = {"runs": len(reports), "pairs": 0, "margins": {}}
    pairs = list(itertools.combinations(range(len(reports)), 2))  # (earlier, later)
    out["pairs"] = len(pairs)
    for margin in margins:
        compared = alarms = 0
        alarm_items: list[str] = []
        pairs_alarmed = set()
        for a, b in pairs:
            stored = StoredRun.from_report(reports[a], f"run{a}")
            outcomes = [ItemOutcome.from_json(i) for i in reports[b]["items"]]
            for c in compare_session(outcomes, stored, margin):
                if c.outcome in ("same", "improved", "regression"):
                    compared += 1
                if c.outcome == "regression":
                    alarms += 1
                    pairs_alarmed.add((a, b))
                    alarm_items.append(f"run{b} vs run{a}: {c.problem}/{c.candidate}: {c.message}")
        out["margins"][f"{margin:g}"] = {"items_compared": compared, "alarms": alarms,
                                         "rate": alarms / compared if compared else None,
                                         "pairs_with_an_alarm": len(pairs_alarmed), "alarm_items": alarm_items}
    widths = [(i["ci"][1] - i["ci"][0]) / i["speedup"] for r in reports for i in r["items"]
              if i["verdict"] == "accepted" and i.get("ci")]
    out["median_rel_ci_width"] = sorted(widths)[len(widths) // 2] if widths else None
    out["verdicts"] = [{f"{i['problem']}/{i['candidate']}": i["verdict"] for i in r["items"]} for r in reports]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--k", type=int, default=4, help="unchanged runs (default 4)")
    ap.add_argument("--out", type=Path, default=Path("ci-false-alarm"))
    ap.add_argument("--margins", default="0,0.05", help="fail margins as fractions (default 0,0.05)")
    ap.add_argument("--reuse", type=Path, default=None, help="analyse the run*.json reports in this folder only")
    ap.add_argument("pytest_args", nargs="*", help="after --: passed to pytest")
    args = ap.parse_args()
    margins = [float(m) for m in args.margins.split(",")]
    out = args.reuse or args.out
    out.mkdir(parents=True, exist_ok=True)
    runs: list[dict] = []
    if args.reuse is None:
        for i in range(args.k):
            runs.append(run_once(i, out, args.pytest_args))
    reports = [json.loads(p.read_text()) for p in sorted(out.glob("run*.json"), key=lambda p: int(p.stem[3:]))]
    summary = analyse(reports, margins)
    summary["runs_meta"] = runs
    summary["pytest_args"] = args.pytest_args
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(f"K={summary['runs']} runs, {summary['pairs']} pairs of runs, median relative CI width "
          f"{summary['median_rel_ci_width']}")
    for m, s in summary["margins"].items():
        rate = "-" if s["rate"] is None else f"{s['rate']:.3%}"
        print(f"margin {float(m):.0%}: {s['items_compared']} items compared, {s['alarms']} alarms, rate {rate}; "
              f"{s['pairs_with_an_alarm']} of {summary['pairs']} pairs of runs with an alarm")
        for a in s["alarm_items"]:
            print(f"  {a}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
