"""The store's subcommands: ``verify``, ``show``, ``quarantine list|release``, ``merge``, and ``protocol digest``
(docs/reference/store.md, docs/reference/protocol.md)."""

from __future__ import annotations

import argparse
import getpass
import os
import sys
from pathlib import Path

from ..errors import ValidatorRefusal
from .registry import DEFAULT_DB, EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE, command, db_arg


def _db_path(args: argparse.Namespace) -> Path:
    return args.db if args.db is not None else Path.cwd() / DEFAULT_DB


def _open_readonly(args: argparse.Namespace):
    from ..store import ResultStore

    return ResultStore.open(_db_path(args), readonly=True)


def _table(rows: list[list[str]], headers: list[str]) -> str:
    cells = [headers, *rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _fmt(x: object, spec: str = ".3g") -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return format(x, spec)
    return str(x)


# ---------------------------------------------------------------------------------------------- verify


def _run_verify(args: argparse.Namespace) -> int:
    with _open_readonly(args) as store:
        report = store.verify()
    print(f"{store.path}")
    print(report.render())
    return EXIT_OK if report.ok else EXIT_PROBLEMS


@command
def _verify(sub) -> None:
    p = sub.add_parser(
        "verify",
        help="check the store: hash chains, MACs, nonce commitments, triggers, integrity; replay every row",
        description="Exit 0 when the store verifies, 1 when problems are found, 2 when it cannot be opened.",
    )
    db_arg(p)
    p.set_defaults(func=_run_verify)


# ---------------------------------------------------------------------------------------------- quarantine


def _run_quarantine_list(args: argparse.Namespace) -> int:
    with _open_readonly(args) as store:
        rows = store.quarantine_list()
    if not rows:
        print("no quarantined measurements")
        return EXIT_OK
    table = [
        [
            str(r["id"]),
            r["run_id"],
            r["problem"],
            r["candidate"],
            r["device"],
            _fmt(r["speedup"]) + "x",
            r["reason"],
            f"release {r['release_id']} by {r['released_by']}: {r['release_reason']}" if r["release_id"] else "-",
        ]
        for r in rows
    ]
    print(_table(table, ["id", "run", "problem", "candidate", "device", "speedup", "reason", "released"]))
    return EXIT_OK


def _run_quarantine_release(args: argparse.Namespace) -> int:
    from ..store import ResultStore

    with ResultStore.open(_db_path(args)) as store:
        try:
            release_id = store.release_quarantine(args.id, args.reason, args.by)
        except ValidatorRefusal as e:
            print(f"autotune: release refused: {e}", file=sys.stderr)
            return EXIT_USAGE
        q = next((r for r in store.quarantine_list() if r["id"] == args.id), None)
    print(f"released quarantine row {args.id} as release {release_id} (by {args.by}: {args.reason})")
    if q is not None:
        print(
            f"a later measurement of problem {q['problem']} with candidate sha256 {q['candidate_sha256'][:12]}... "
            f"may now be recorded with breaker 'released:{release_id}'"
        )
    return EXIT_OK


def _default_user() -> str:
    try:
        return os.environ.get("USER") or getpass.getuser()
    except (KeyError, OSError, ImportError):  # pragma: no cover - no user database
        return "unknown"


@command
def _quarantine(sub) -> None:
    p = sub.add_parser("quarantine", help="list or release measurements the breaker quarantined")
    qsub = p.add_subparsers(dest="quarantine_command", metavar="{list,release}")
    qsub.required = True
    pl = qsub.add_parser("list", help="list quarantined measurements and their releases")
    db_arg(pl)
    pl.set_defaults(func=_run_quarantine_list)
    pr = qsub.add_parser(
        "release",
        help="release a quarantined measurement, with a written reason (recorded, never silent)",
    )
    pr.add_argument("id", type=int, help="quarantine row id (see: autotune quarantine list)")
    pr.add_argument("--reason", required=True, help="why the measurement is genuine (at least 10 characters)")
    pr.add_argument("--by", default=_default_user(), help="who releases it (default: the current user)")
    db_arg(pr)
    pr.set_defaults(func=_run_quarantine_release)


# ---------------------------------------------------------------------------------------------- merge


def _run_merge(args: argparse.Namespace) -> int:
    from ..store import merge_databases

    report = merge_databases([Path(s) for s in args.sources], Path(args.output), force=args.force)
    print(report.render())
    return EXIT_OK if report.ok else EXIT_PROBLEMS


@command
def _merge(sub) -> None:
    p = sub.add_parser(
        "merge",
        help="merge stores into one, every row through the target's validator",
        description="Runs already in the target are skipped; refused rows are reported (exit 1).",
    )
    p.add_argument("sources", nargs="+", metavar="SOURCE.db")
    p.add_argument("-o", "--output", required=True, metavar="TARGET.db", help="target store (created if missing)")
    p.add_argument(
        "--force", action="store_true", help="merge sources that fail verify (every row is still re-validated)"
    )
    p.set_defaults(func=_run_merge)


# ---------------------------------------------------------------------------------------------- show


def _run_show(args: argparse.Namespace) -> int:
    with _open_readonly(args) as store:
        rows = store.results(args.run)
        runs = {r["run_id"]: r for r in store.runs()}
    if args.run is not None and args.run not in runs:
        print(f"autotune: run {args.run!r} is not in {store.path}", file=sys.stderr)
        return EXIT_USAGE
    if not rows:
        print("no results" + (f" for run {args.run}" if args.run else ""))
        return EXIT_OK
    table = [
        [
            str(r["id"]),
            r["run_id"],
            r["kind"],
            r["problem"],
            r["candidate"],
            r["baseline"],
            r["device"],
            f"{_fmt(r['speedup'], '.3f')}x",
            f"[{_fmt(r['ci_low'], '.3f')}, {_fmt(r['ci_high'], '.3f')}]",
            str(r["n_pairs"]),
            _fmt(r["candidate_s"], ".3e"),
            _fmt(r["baseline_s"], ".3e"),
            ("exploratory " if r["exploratory"] else "") + ("" if r["breaker"] == "ok" else r["breaker"]),
        ]
        for r in rows
    ]
    print(
        _table(
            table,
            ["id", "run", "kind", "problem", "candidate", "baseline", "device", "speedup", "95% CI", "pairs",
             "candidate_s", "baseline_s", "flags"],
        )
    )
    return EXIT_OK


@command
def _show(sub) -> None:
    p = sub.add_parser("show", help="print the recorded results as a table")
    db_arg(p)
    p.add_argument("--run", default=None, metavar="RUN_ID", help="only this run's results")
    p.set_defaults(func=_run_show)


# ---------------------------------------------------------------------------------------------- protocol


def _run_protocol_digest(args: argparse.Namespace) -> int:
    from ..protocol import find_protocol, load_protocol

    path = Path(args.path) if args.path else find_protocol(Path.cwd())
    proto = load_protocol(path)
    print(f"{proto.sha256}  {path}")
    return EXIT_OK


@command
def _protocol(sub) -> None:
    p = sub.add_parser("protocol", help="protocol.toml helpers")
    psub = p.add_subparsers(dest="protocol_command", metavar="{digest}")
    psub.required = True
    pd = psub.add_parser("digest", help="print the sha256 of a protocol.toml (to pin it in protocol_registry.py)")
    pd.add_argument(
        "path", nargs="?", default=None, help="protocol file (default: ./protocol.toml, else the packaged one)"
    )
    pd.set_defaults(func=_run_protocol_digest)
