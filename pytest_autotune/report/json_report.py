"""The JSON report (schema ``pytest-autotune/report/1``, documented in docs/reference/report.md and validated against
``report.schema.json`` shipped beside this module)."""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Sequence

if TYPE_CHECKING:  # pragma: no cover
    from ..protocol import BarsSection
    from ..result import ItemOutcome
    from .snapshot import SessionSnapshot

SCHEMA_ID = "pytest-autotune/report/1"
SCHEMA_PATH = Path(__file__).with_name("report.schema.json")


def _key(p: float) -> str:
    return f"{p:g}"


def summarize(outcomes: Sequence["ItemOutcome"], thresholds: Sequence[float], measuring: bool) -> dict[str, Any]:
    counts = {v: sum(1 for o in outcomes if o.verdict == v) for v in ("accepted", "rejected", "quarantined", "error")}
    n = len(outcomes)
    correct = [o for o in outcomes if o.verdict == "accepted"]
    fast_p: dict[str, Optional[float]] = {}
    for p in thresholds:
        if n == 0:
            fast_p[_key(p)] = None
        elif p <= 0:
            fast_p[_key(p)] = len(correct) / n
        elif not measuring:
            fast_p[_key(p)] = None
        else:
            fast_p[_key(p)] = sum(1 for o in correct if o.measurement and o.measurement.speedup > p) / n
    speedups = [o.measurement.speedup for o in correct if o.measurement is not None]
    return {
        **counts,
        "total": n,
        "correct_fraction": (len(correct) / n) if n else None,
        "fast_p": fast_p,
        "median_speedup": statistics.median(speedups) if speedups else None,
    }


def bars(summary: dict[str, Any], b: "BarsSection") -> list[dict[str, Any]]:
    out = []
    cf = summary.get("correct_fraction")
    out.append({"name": "level1_correctness", "threshold": b.level1_min_correct_fraction, "value": cf,
                "status": "PASS" if cf is not None and cf >= b.level1_min_correct_fraction else "MISS"})
    ms = summary.get("median_speedup")
    out.append({"name": "level1_median_speedup", "threshold": b.level1_min_median_speedup, "value": ms,
                "status": "PASS" if ms is not None and ms >= b.level1_min_median_speedup else "MISS"})
    return out


def build_report(snap: "SessionSnapshot") -> dict[str, Any]:
    from .precision import session_precision

    summary = summarize(snap.outcomes, snap.protocol.bars.fast_p_thresholds, snap.measuring)
    precision = session_precision(snap)
    summary["precision"] = None if precision is None else {**dataclasses.asdict(precision), "line": precision.line()}
    return {
        "schema": SCHEMA_ID,
        "run": snap.run,
        "items": [o.to_json() for o in sorted(snap.outcomes, key=lambda o: o.nodeid)],
        "summary": summary,
        "bars": bars(summary, snap.protocol.bars),
        "store_errors": list(snap.store_errors),
        "studies": snap.studies,
        **snap.sections,
    }


def write_report(path: Path, report: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(report, indent=2, sort_keys=True, default=str, allow_nan=False) + "\n")
    os.replace(tmp, path)


def load_schema() -> dict[str, Any]:
    return json.loads(SCHEMA_PATH.read_text())
