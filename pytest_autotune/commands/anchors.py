"""``autotune anchors``: the external anchors, their pre-registration and their latest verdicts
(docs/guide/anchors.md)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from .common import db_of, protocol_of, root_arg, root_of
from .registry import EXIT_OK, command, db_arg


def _anchor_files(root: Path, given: list[Path]) -> list[Path]:
    from ..problems.discovery import BUNDLED_ROOT
    from ..study.anchors import ANCHORS_FILE

    if given:
        return [p if p.is_absolute() else root / p for p in given]
    return sorted((root / BUNDLED_ROOT).rglob(ANCHORS_FILE))


def _run(args: argparse.Namespace) -> int:
    from ..store import ResultStore
    from ..store.studies import registration, study_results
    from ..study.anchors import anchor_verdict, parse_anchors
    from ..study.registry import ANCHOR_SECTION, check_registration

    root = root_of(args)
    protocol = protocol_of(args)
    db = db_of(args)
    store = ResultStore.open(db, readonly=True) if db.exists() else None
    out = []
    try:
        for f in _anchor_files(root, args.file):
            rel = f.resolve().relative_to(root.resolve()).as_posix() if root.resolve() in f.resolve().parents \
                else str(f)
            for anchor in parse_anchors(f).values():
                reg = registration(store, anchor.study) if store else None
                now = check_registration(root, rel, ANCHOR_SECTION, anchor.id, study=anchor.study)
                if reg is not None:
                    ok = reg["status"] == "registered" and reg["entry_sha256"] == now.entry_sha256
                    detail = reg["detail"] if ok else (
                        f"{reg['status']} at the first measurement: {reg['detail']}"
                        if reg["status"] != "registered" else "the entry was edited since the first measurement")
                else:
                    ok, detail = now.registered, now.detail + " (not measured yet)"
                rows = study_results(store, anchor.study) if store is not None else []
                latest = {}
                for r in rows:
                    latest[r["device"]] = r
                verdicts = [{"device": d, "run_id": r["run_id"], "result": f"results:{r['id']}",
                             **anchor_verdict(anchor, r["speedup"], d, protocol.bands.anchoring, ok,
                                              detail).to_json()} for d, r in latest.items()]
                verdicts += _quarantined(store, anchor, set(latest))
                out.append({"anchor": anchor.id, "problem": anchor.problem, "candidate": anchor.candidate,
                            "published_ratio": anchor.published_ratio, "hardware": anchor.hardware,
                            "expected_direction": anchor.expected_direction, "registered": ok,
                            "registration": detail, "file": rel, "measurements": verdicts})
    finally:
        if store is not None:
            store.close()
    for a in out:
        print(f"{a['anchor']}: published {a['published_ratio']:.3g}x on {a['hardware']} "
              f"(expected to diverge: {a['expected_direction']}); "
              + ("pre-registered" if a["registered"] else "NOT pre-registered") + f" -- {a['registration']}")
        if not a["measurements"]:
            print("  not measured: pytest --autotune -m anchor --device=cuda")
        for m in a["measurements"]:
            print(f"  {m['device']}: {m['verdict']} -- {m['detail']} [{m['result']}, run {m['run_id'][:12]}]")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"schema": "pytest-autotune/anchors/1", "anchors": out}, indent=2) + "\n")
    return EXIT_OK


def _quarantined(store, anchor, measured: set) -> list[dict]:
    """An anchor the breaker quarantined on a device where it has no result: a verdict of its own (the measured
    ratio, the quarantine row, how to release it), not "not measured"."""
    if store is None:
        return []
    latest: dict = {}
    for q in store.quarantine_list():
        if q.get("study") == anchor.study and q["device"] not in measured and not q["releases"]:
            latest[q["device"]] = q
    return [{"device": d, "run_id": q["run_id"], "result": f"quarantine:{q['id']}",
             "verdict": "quarantined by the breaker", "measured_ratio": q["speedup"],
             "published_ratio": anchor.published_ratio, "relative": q["speedup"] / anchor.published_ratio,
             "detail": f"measured {q['speedup']:.3g}x [{q['ci_low']:.3g}, {q['ci_high']:.3g}] vs published "
                       f"{anchor.published_ratio:.3g}x ({q['speedup'] / anchor.published_ratio:.2f} of it), above "
                       f"the protocol's breaker: no result until a human releases it (autotune quarantine release "
                       f"{q['id']} --reason ...)"} for d, q in latest.items()]


@command
def _anchors(sub) -> None:
    p = sub.add_parser("anchors", help="external anchors: published numbers, pre-registration, latest verdicts",
                       description="Lists every anchor of the anchors.toml files under benchmarks/kernels (or "
                                   "--file), whether its entry was committed before its first measurement, and "
                                   "the verdict of its latest measurement per device.")
    p.add_argument("--file", action="append", type=Path, default=[], metavar="ANCHORS.toml")
    p.add_argument("--json", type=Path, default=None, metavar="PATH")
    db_arg(p)
    root_arg(p)
    p.set_defaults(func=_run)
