"""Frozen result objects (pyperf-style): what a run and an item produced, immutable once built.

These are the only things that cross from the measuring side to the store and the report. Field names are the
column names of docs/reference/store.md ("Tables and columns"), so ``as_row()`` is the row the store inserts.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any, Literal, Optional

Verdict = Literal["accepted", "rejected", "quarantined", "error"]
Gate = Literal["provenance", "correctness", "probe", "integrity", "timing", "breaker", "store", "load", "reply"]


def canonical_json(value: Any) -> str:
    """The one JSON spelling used for JSON columns and hashing: sorted keys, no spaces, no NaN."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)


@dataclass(frozen=True)
class RunRecord:
    """One pytest session that measures (``--autotune``). ``nonce`` itself is kept by the controller and only
    written at the end of the run (commit: ``nonce_sha256`` at start; reveal: ``nonce`` at finish)."""

    run_id: str
    started_at: str
    protocol_version: str
    protocol_sha256: str
    protocol_frozen: bool
    exploratory: bool
    git_sha: Optional[str]
    git_dirty: Optional[bool]
    harness_version: str
    harness_sha256: str
    host: str
    device: str
    device_fingerprint: dict
    python_version: str
    torch_version: Optional[str]
    numpy_version: Optional[str]
    mlx_version: Optional[str]
    nonce_sha256: str
    argv: tuple[str, ...]
    provenance: dict

    def as_row(self) -> dict[str, Any]:
        row = dataclasses.asdict(self)
        row["protocol_frozen"] = int(self.protocol_frozen)
        row["exploratory"] = int(self.exploratory)
        row["git_dirty"] = None if self.git_dirty is None else int(self.git_dirty)
        row["device_fingerprint"] = canonical_json(self.device_fingerprint)
        row["argv"] = canonical_json(list(self.argv))
        row["provenance"] = canonical_json(self.provenance)
        return row


@dataclass(frozen=True)
class Measurement:
    """The numbers of a paired timing: candidate vs the strongest frozen baseline on one device."""

    n_pairs: int
    candidate_s: float  # median seconds per candidate call
    baseline_s: float  # median seconds per baseline call
    speedup: float  # median of paired ratios baseline/candidate
    ci_low: float
    ci_high: float
    ci_target_met: bool
    strawman_speedup: float  # against the naive reference (== speedup when the reference is the strongest)
    calls_per_sample: int = 1
    stop_reason: str = ""


@dataclass(frozen=True)
class KernelResult:
    """An accepted kernel measurement: the row that goes into ``results``."""

    run_id: str
    kind: Literal["kernel", "engine"]
    nodeid: str
    problem: str
    problem_sha256: str
    candidate: str
    candidate_sha256: str
    baseline: str
    baseline_sha256: str
    device: str
    seeds: tuple[int, ...]
    measurement: Measurement
    correctness: str  # "passed"
    probes: dict  # {"status": "passed"|"disabled", "examples": n, "seed": s}
    integrity: str  # "passed"
    breaker: str  # "ok" or "released:<release id>"
    protocol_sha256: str
    exploratory: bool
    provenance: dict
    study: Optional[str] = None
    arm: Optional[str] = None
    iteration: Optional[int] = None
    notes: tuple[str, ...] = field(default_factory=tuple)
    #: how its answers were judged: contract, findings, accuracy, KernelBench's verdict (problems/contract.py)
    contract: Optional[dict] = None

    def as_row(self) -> dict[str, Any]:
        m = self.measurement
        return {
            "run_id": self.run_id,
            "kind": self.kind,
            "nodeid": self.nodeid,
            "problem": self.problem,
            "problem_sha256": self.problem_sha256,
            "candidate": self.candidate,
            "candidate_sha256": self.candidate_sha256,
            "baseline": self.baseline,
            "baseline_sha256": self.baseline_sha256,
            "device": self.device,
            "seeds": canonical_json(list(self.seeds)),
            "n_pairs": m.n_pairs,
            "candidate_s": m.candidate_s,
            "baseline_s": m.baseline_s,
            "speedup": m.speedup,
            "ci_low": m.ci_low,
            "ci_high": m.ci_high,
            "ci_target_met": int(m.ci_target_met),
            "strawman_speedup": m.strawman_speedup,
            "correctness": self.correctness,
            "probes": canonical_json(self.probes),
            "integrity": self.integrity,
            "breaker": self.breaker,
            "protocol_sha256": self.protocol_sha256,
            "exploratory": int(self.exploratory),
            "study": self.study,
            "arm": self.arm,
            "iteration": self.iteration,
            "provenance": canonical_json(self.provenance),
            # a column of migration 0006: absent from the row where there is nothing to put there (a store of an
            # earlier schema, migrated later, takes the same row)
            **({"contract": canonical_json(self.contract)} if self.contract is not None else {}),
        }


@dataclass(frozen=True)
class QuarantineRecord:
    """A measurement the breaker stopped: same numbers as a result, plus the reason."""

    result: KernelResult
    reason: str

    def as_row(self) -> dict[str, Any]:
        row = self.result.as_row()
        row["reason"] = self.reason
        return row


@dataclass(frozen=True)
class Rejection:
    """An item that a gate refused (or that errored): no numbers, just who refused it and why."""

    run_id: str
    nodeid: str
    problem: str
    candidate: str
    device: str
    gate: str
    verdict: Verdict
    detail: str
    contract: Optional[dict] = None

    def as_row(self) -> dict[str, Any]:
        row = dataclasses.asdict(self)
        contract = row.pop("contract")
        if contract is not None:  # migration 0006's column, only where there is something to put there
            row["contract"] = canonical_json(contract)
        return row


@dataclass(frozen=True)
class ItemOutcome:
    """What one item ended as, for the report (accepted, rejected, quarantined or error)."""

    nodeid: str
    kind: str
    problem: str
    candidate: str
    device: str
    verdict: Verdict
    gate: Optional[str]
    reason: str
    result: Optional[KernelResult] = None
    baseline: Optional[str] = None
    measurement: Optional[Measurement] = None
    warnings: tuple[str, ...] = ()
    details: dict = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        m = self.measurement
        return {
            "nodeid": self.nodeid,
            "kind": self.kind,
            "problem": self.problem,
            "candidate": self.candidate,
            "device": self.device,
            "verdict": self.verdict,
            "gate": self.gate,
            "reason": self.reason,
            "speedup": m.speedup if m else None,
            "ci": [m.ci_low, m.ci_high] if m else None,
            "baseline": self.baseline,
            "strawman_speedup": m.strawman_speedup if m else None,
            "n_pairs": m.n_pairs if m else None,
            "candidate_s": m.candidate_s if m else None,
            "baseline_s": m.baseline_s if m else None,
            "ci_target_met": m.ci_target_met if m else None,
            "retest_of": (self.details.get("transfer") or {}).get("retest_of"),
            "transfer_ratio": (self.details.get("transfer") or {}).get("transfer_ratio"),
            "warnings": list(self.warnings),
            "clause": self.details.get("clause"),
            "findings": list(self.details.get("findings") or []),
            "kernelbench": self.details.get("kernelbench"),
            "details": self.details,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "ItemOutcome":
        m = None
        if d.get("speedup") is not None:
            m = Measurement(
                n_pairs=d["n_pairs"],
                candidate_s=d["candidate_s"],
                baseline_s=d["baseline_s"],
                speedup=d["speedup"],
                ci_low=d["ci"][0],
                ci_high=d["ci"][1],
                ci_target_met=bool(d.get("ci_target_met")),
                strawman_speedup=d["strawman_speedup"],
            )
        return cls(
            nodeid=d["nodeid"],
            kind=d["kind"],
            problem=d["problem"],
            candidate=d["candidate"],
            device=d["device"],
            verdict=d["verdict"],
            gate=d["gate"],
            reason=d["reason"],
            baseline=d.get("baseline"),
            measurement=m,
            warnings=tuple(d.get("warnings", ())),
            details=d.get("details", {}),
        )
