"""``autotune study report NAME`` and ``autotune study list`` (docs/guide/studies.md)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .common import calls_arg, db_of, protocol_of, root_arg, root_of
from .registry import EXIT_OK, EXIT_USAGE, command, db_arg


def _run_report(args: argparse.Namespace) -> int:
    from ..store import ResultStore
    from ..study.recorder import ANCHOR_PREFIX
    from ..study.report import build_study_report, record

    if args.name.startswith(ANCHOR_PREFIX):
        print(f"autotune: {args.name} is an external anchor: its verdict is autotune anchors", file=sys.stderr)
        return EXIT_USAGE
    protocol = protocol_of(args)
    try:
        calls = calls_arg(args.calls)
    except argparse.ArgumentTypeError as e:
        print(f"autotune: {e}", file=sys.stderr)
        return EXIT_USAGE
    with ResultStore.open(db_of(args), readonly=args.no_record) as store:
        from ..store.studies import registration, study_rows

        rows = study_rows(store, args.name)
        if registration(store, args.name) is None and not any(rows.values()):
            print(f"autotune: no study {args.name!r} in {store.path}; list studies with autotune study list",
                  file=sys.stderr)
            return EXIT_USAGE
        report = build_study_report(store, args.name, root_of(args), protocol, calls, args.registry)
        recorded = None if args.no_record else record(store, report, protocol)
    print(report.render())
    if recorded is not None:
        print(f"  recorded: study_verdicts row {recorded} in {db_of(args)}")
    if args.json:
        body = report.to_json()
        body["recorded"] = recorded
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(body, indent=2, sort_keys=True) + "\n")
    if args.plot:
        from ..report.plots import plot_study

        print(f"  plot: {plot_study(report.to_json(), args.plot)}")
    return EXIT_OK


def _run_list(args: argparse.Namespace) -> int:
    from ..store import ResultStore
    from ..store.studies import registration, study_names, verdicts

    with ResultStore.open(db_of(args), readonly=True) as store:
        names = study_names(store)
        if not names:
            print("no studies")
            return EXIT_OK
        for name in names:
            reg = registration(store, name)
            last = verdicts(store, name)
            label = last[-1]["label"] if last else "(no report yet)"
            print(f"{name}: {reg['status'] if reg else '?'}; last verdict: {label}")
    return EXIT_OK


@command
def _study(sub) -> None:
    p = sub.add_parser("study", help="studies: verdicts of pre-registered comparisons of tuning methods")
    ssub = p.add_subparsers(dest="study_command", metavar="{report,list}")
    ssub.required = True
    pr = ssub.add_parser("report", help="per arm: usable iterations, best-so-far, final speedup with CI; the verdict",
                         description="Prints the study's verdict (supported, not supported, saturated at <wall>, "
                                     "void: treatment not delivered, below usability bar, incomplete; marked "
                                     "exploratory and/or plumbing suspect) and records it in study_verdicts.")
    pr.add_argument("name", metavar="NAME")
    db_arg(pr)
    root_arg(pr)
    pr.add_argument("--registry", default=None, metavar="PATH",
                    help="registry file relative to the root, when the store has no registration to name it")
    pr.add_argument("--calls", action="append", default=[], metavar="ARM=PATH",
                    help="an arm's model-call log (JSON lines): plumbing audit and arm markers (repeatable; "
                         "overrides the entry's calls)")
    pr.add_argument("--json", type=Path, default=None, metavar="PATH",
                    help="write the report as JSON")
    pr.add_argument("--plot", type=Path, default=None, metavar="PNG",
                    help="write the best-so-far trajectories per arm as a PNG")
    pr.add_argument("--no-record", action="store_true", help="do not record the verdict in the store")
    pr.set_defaults(func=_run_report)
    pl = ssub.add_parser("list", help="studies in the store, their registration and last verdict")
    db_arg(pl)
    root_arg(pl)
    pl.set_defaults(func=_run_list)
