"""``autotune remeasure RUN``: re-time every accepted result of a run in a new run, linked row by row, and
report verdict agreement and the deviation of speedups (docs/guide/studies.md)."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from .common import db_of, root_arg, root_of
from .registry import EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE, command, db_arg


def _run(args: argparse.Namespace) -> int:
    from ..store import ResultStore
    from ..store.studies import remeasured_rows
    from ..study.remeasure import build_report, original_options

    db = db_of(args).resolve()
    root = root_of(args)
    with ResultStore.open(db, readonly=True) as store:
        runs = {r["run_id"]: r for r in store.runs()}
        run = runs.get(args.run)
        if run is None:
            print(f"autotune: run {args.run!r} is not in {db}; list runs with autotune show", file=sys.stderr)
            return EXIT_USAGE
        old = store.results(args.run)
    if not old:
        print(f"autotune: run {args.run} has no accepted result to re-measure", file=sys.stderr)
        return EXIT_USAGE
    missing = [r["nodeid"] for r in old if not (root / r["nodeid"].split("::", 1)[0]).is_file()]
    if missing:
        print(f"autotune: {len(missing)} item(s) of run {args.run} name files that are not under {root} "
              f"({missing[0]}...): run from the rootdir of that run, or pass --root", file=sys.stderr)
        return EXIT_USAGE
    with tempfile.TemporaryDirectory(prefix="autotune-remeasure-") as tmp:
        report_path = Path(tmp) / "report.json"
        cmd = [sys.executable, "-m", "pytest", "--autotune", f"--autotune-remeasure={args.run}",
               f"--autotune-db={db}", f"--device={run['device']}", f"--autotune-json={report_path}",
               "-p", "no:cacheprovider", *original_options(run["argv"])]
        if run["exploratory"]:
            cmd.append("--autotune-exploratory")
        cmd += [*args.pytest_args, *[r["nodeid"] for r in old]]
        print(f"re-measuring {len(old)} accepted result(s) of run {args.run} on {run['device']}:", flush=True)
        print("  " + " ".join(cmd[:12]) + f" ... ({len(old)} node ids)", flush=True)
        if args.dry_run:
            return EXIT_OK
        rc = subprocess.run(cmd, cwd=root).returncode
        new_report = json.loads(report_path.read_text()) if report_path.exists() else None
    if new_report is None:
        print(f"autotune: the re-measuring session wrote no report (pytest exit {rc})", file=sys.stderr)
        return EXIT_USAGE
    new_run = (new_report.get("run") or {}).get("run_id")
    with ResultStore.open(db, readonly=True) as store:
        linked = remeasured_rows(store, new_run) if new_run else []
    rep = build_report(args.run, run["device"], old, new_report, linked)
    print()
    print(rep.render())
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(rep.to_json(), indent=2, sort_keys=True) + "\n")
    return EXIT_OK if rep.agreeing == len(rep.pairs) else EXIT_PROBLEMS


@command
def _remeasure(sub) -> None:
    p = sub.add_parser(
        "remeasure", help="re-time a run's accepted results in a new run; verdict agreement and deviation",
        description="Runs pytest --autotune on the run's accepted items (same device, same collection options), "
                    "links each new result to the one it re-measures (results.remeasure_of), and reports how many "
                    "verdicts agree and the median |new/old - 1| of speedups. Exit 0 when every verdict agrees, 1 "
                    "when one does not, 2 on usage errors. Arguments after -- go to pytest.")
    p.add_argument("run", metavar="RUN_ID")
    db_arg(p)
    root_arg(p)
    p.add_argument("--json", type=Path, default=None, metavar="PATH", help="write the comparison as JSON")
    p.add_argument("--dry-run", action="store_true", help="print the pytest command and stop")
    p.add_argument("pytest_args", nargs="*", metavar="-- PYTEST_ARGS", help="extra pytest arguments (after --)")
    p.set_defaults(func=_run)
