"""``autotune export RUN [--json] [-o PATH]``: a recorded run as a committable JSON report, with its protocol digest
and device fingerprint, that ``pytest --autotune-compare=PATH`` reads (docs/guide/ci.md)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .registry import EXIT_OK, EXIT_USAGE, command, db_arg


def _run(args: argparse.Namespace) -> int:
    from ..ci.export import run_report
    from ..store import ResultStore
    from .common import db_of

    db = db_of(args)
    if not db.exists():
        print(f"autotune export: no store at {db} (pass --db=PATH)", file=sys.stderr)
        return EXIT_USAGE
    with ResultStore.open(db, readonly=True) as store:
        report = run_report(store, args.run, device=args.device)
    text = json.dumps(report, indent=2, sort_keys=True, allow_nan=False) + "\n"
    if args.output is None:
        sys.stdout.write(text)
        return EXIT_OK
    from ..report.json_report import write_report

    write_report(args.output, report)
    run = report["run"]
    print(f"{args.output}: run {run['run_id']} ({len(report['items'])} items, device {run['device']}, protocol "
          f"{run['protocol_version']} {run['protocol_sha256'][:12]})")
    return EXIT_OK


@command
def _export(sub) -> None:
    p = sub.add_parser("export", help="write a recorded run as a JSON report (a baseline for --autotune-compare)",
                       description="Write run RUN (a run id, a unique prefix, or 'latest': the most recent finished "
                                   "run) as a JSON report (schema pytest-autotune/report/1) with its protocol digest "
                                   "and device fingerprint. Commit it (e.g. benchmarks/baseline-cpu.json) and gate "
                                   "PRs with pytest --autotune --autotune-compare=PATH (docs/guide/ci.md).")
    p.add_argument("run", metavar="RUN", help="run id, unique prefix (6+ characters) or 'latest'")
    p.add_argument("--json", action="store_true", help="write JSON: the only format, and the default (named for "
                   "scripts that say what they expect)")
    p.add_argument("-o", "--output", type=Path, default=None, metavar="PATH", help="file to write (default: stdout)")
    p.add_argument("--device", default=None, metavar="NAME", help="with 'latest': the latest run on this device")
    db_arg(p)
    p.add_argument("--root", type=Path, default=None, metavar="DIR",
                   help="the project's rootdir; the default store is .autotune/results.db under it (default: the "
                        "current directory)")
    p.set_defaults(func=_run)
