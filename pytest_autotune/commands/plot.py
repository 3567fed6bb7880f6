"""``autotune plot``: PNG plots from the store or a JSON report (docs/guide/studies.md#plots)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .common import db_of, protocol_of, root_arg, root_of
from .registry import EXIT_OK, EXIT_USAGE, command, db_arg


def _items(args: argparse.Namespace) -> tuple[list[dict], str]:
    from ..report.plots import default_title, items_from_store
    from ..store import ResultStore

    if args.report is not None:
        rep = json.loads(args.report.read_text())
        return rep.get("items", []), default_title(rep.get("run"))
    with ResultStore.open(db_of(args), readonly=True) as store:
        runs = store.runs()
        if not runs:
            return [], ""
        run_id = args.run or runs[-1]["run_id"]
        run = next((r for r in runs if r["run_id"] == run_id), None)
        if run is None:
            raise SystemExit(f"autotune: run {run_id!r} is not in {store.path}")
        return items_from_store(store.results(run_id), store.rejections(run_id)), default_title(run)


def _run(args: argparse.Namespace) -> int:
    from ..report import plots

    out: Path = args.out
    written: list[Path] = []
    if args.what == "study":
        if not args.study:
            print("autotune: plot study needs --study=NAME", file=sys.stderr)
            return EXIT_USAGE
        from ..store import ResultStore
        from ..study.report import build_study_report

        with ResultStore.open(db_of(args), readonly=True) as store:
            rep = build_study_report(store, args.study, root_of(args), protocol_of(args))
        target = out if out.suffix == ".png" else out / f"study-{args.study}.png"
        written.append(plots.plot_study(rep.to_json(), target))
    else:
        items, title = _items(args)
        if not items:
            print("autotune: nothing to plot (no items)", file=sys.stderr)
            return EXIT_USAGE
        kinds = ["speedups", "aa", "transfer"] if args.what == "all" else [args.what]
        for kind in kinds:
            target = out if (out.suffix == ".png" and args.what != "all") else out / f"{kind}.png"
            fn = {"speedups": plots.plot_speedups, "aa": plots.plot_aa, "transfer": plots.plot_transfer}[kind]
            subset = [i for i in items if i["candidate"] != plots.AA_CANDIDATE] if kind == "speedups" else items
            try:
                written.append(fn(subset, target, title))
            except Exception as e:  # noqa: BLE001 - "all" skips kinds with no data
                if args.what != "all":
                    raise
                print(f"  {kind}: skipped ({e})")
    for w in written:
        print(w)
    return EXIT_OK


@command
def _plot(sub) -> None:
    p = sub.add_parser("plot", help="PNG plots: speedups with CI and strawman, A/A, transfer ratios, study "
                                    "trajectories")
    p.add_argument("what", choices=["speedups", "aa", "transfer", "study", "all"])
    p.add_argument("--out", type=Path, required=True, metavar="PNG_OR_DIR")
    p.add_argument("--run", default=None, metavar="RUN_ID", help="the run to plot (default: the latest)")
    p.add_argument("--report", type=Path, default=None, metavar="REPORT.json",
                   help="plot a JSON report (--autotune-json) instead of the store")
    p.add_argument("--study", default=None, metavar="NAME", help="the study (plot study)")
    db_arg(p)
    root_arg(p)
    p.set_defaults(func=_run)
