"""A recorded run as a JSON report (schema ``pytest-autotune/report/1``): what ``autotune export RUN --json``
writes and what ``--autotune-compare=RUN_ID|latest`` reads from the store, so a stored run and a committed
baseline file are one representation (docs/guide/ci.md#a-baseline-that-travels)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Optional

from ..errors import AutotuneUsageError

if TYPE_CHECKING:  # pragma: no cover
    from ..store import ResultStore

_JSON_RUN_COLUMNS = ("device_fingerprint", "argv", "provenance")


def resolve_run(store: "ResultStore", spec: str, *, device: Optional[str] = None,
                exclude: Optional[str] = None) -> dict:
    """The runs row named by ``spec``: a run id (or a unique prefix of at least 6 characters) or ``latest`` (the
    most recent finished run, on ``device`` when given, other than ``exclude``: the session's own run)."""
    runs = [r for r in store.runs() if r["run_id"] != exclude]
    if spec == "latest":
        done = [r for r in runs if r.get("finished_at") and (device is None or r["device"] == device)]
        if not done:
            where = f" on device {device}" if device else ""
            raise AutotuneUsageError(
                f"no finished run{where} in {store.path}: record one first (pytest --autotune on the default branch), "
                "or compare with a committed report: --autotune-compare=benchmarks/baseline-cpu.json")
        return done[-1]
    hits = [r for r in runs if r["run_id"] == spec] or (
        [r for r in runs if r["run_id"].startswith(spec)] if len(spec) >= 6 else [])
    if len(hits) != 1:
        what = "is ambiguous" if hits else "is not"
        raise AutotuneUsageError(f"run {spec!r} {what} in {store.path}; give a full run id (autotune show lists "
                                 "them), 'latest', or a JSON report path")
    return hits[0]


def _run_json(row: dict, db: str) -> dict[str, Any]:
    run = dict(row)
    for k in _JSON_RUN_COLUMNS:
        if isinstance(run.get(k), str):
            run[k] = json.loads(run[k])
    run["db"] = db
    run["isolation"] = (run.get("provenance") or {}).get("isolation")
    return run


def _measured(r: dict, verdict: str, gate: Optional[str], reason: str) -> dict[str, Any]:
    return {"nodeid": r["nodeid"], "kind": r["kind"], "problem": r["problem"], "candidate": r["candidate"],
            "device": r["device"], "verdict": verdict, "gate": gate, "reason": reason, "speedup": r["speedup"],
            "ci": [r["ci_low"], r["ci_high"]], "baseline": r["baseline"], "strawman_speedup": r["strawman_speedup"],
            "n_pairs": r["n_pairs"], "candidate_s": r["candidate_s"], "baseline_s": r["baseline_s"],
            "ci_target_met": bool(r["ci_target_met"]), "warnings": [], "details": {}}


def run_items(store: "ResultStore", run_id: str) -> list[dict[str, Any]]:
    """The run's items as report items: accepted results, quarantined measurements, refusals."""
    items: dict[str, dict[str, Any]] = {}
    for r in store.results(run_id):
        items[r["nodeid"]] = _measured(r, "accepted", None, "recorded result")
    for q in store.quarantine_list():
        if q["run_id"] == run_id:
            items.setdefault(q["nodeid"], _measured(q, "quarantined", "breaker", q["reason"]))
    for j in store.rejections(run_id):
        if j["nodeid"] in items:
            continue
        items[j["nodeid"]] = {"nodeid": j["nodeid"], "kind": "kernel", "problem": j["problem"],
                              "candidate": j["candidate"], "device": j["device"], "verdict": j["verdict"],
                              "gate": j["gate"] or "unknown", "reason": j["detail"], "speedup": None, "ci": None,
                              "baseline": None, "strawman_speedup": None, "n_pairs": None, "candidate_s": None,
                              "baseline_s": None, "ci_target_met": None, "warnings": [], "details": {}}
    return [items[k] for k in sorted(items)]


def run_report(store: "ResultStore", spec: str, *, device: Optional[str] = None,
               exclude: Optional[str] = None, require_finished: bool = True) -> dict[str, Any]:
    """The JSON report of a recorded run (``spec``: run id, prefix or ``latest``), valid against the report
    schema, with the run's protocol digest and device fingerprint."""
    from ..protocol import parse_protocol
    from ..report.json_report import SCHEMA_ID, bars, summarize
    from ..result import ItemOutcome

    row = resolve_run(store, spec, device=device, exclude=exclude)
    if require_finished and not row.get("finished_at"):
        raise AutotuneUsageError(f"run {row['run_id']} was never closed (its session did not finish): its rows cannot "
                                 "be verified; export a finished run")
    items = run_items(store, row["run_id"])
    body = store.protocol_body(row["protocol_sha256"])
    report: dict[str, Any] = {"schema": SCHEMA_ID, "run": _run_json(row, str(store.path)), "items": items,
                              "store_errors": []}
    outcomes = [ItemOutcome.from_json(i) for i in items]
    if body is not None:
        proto = parse_protocol(body.encode("utf-8"), source=f"protocol {row['protocol_sha256'][:12]} (store)")
        report["summary"] = summarize(outcomes, proto.bars.fast_p_thresholds, measuring=True)
        report["bars"] = bars(report["summary"], proto.bars)
    else:  # pragma: no cover - every run's protocol is registered before the run begins
        report["summary"] = summarize(outcomes, (0.0, 1.0, 1.2), measuring=True)
        report["bars"] = []
    return report
