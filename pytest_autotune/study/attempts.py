"""A study's attempts: one per recorded item of the study, accepted or refused, whatever its kind.

Everything here is read from store rows (``results``, ``rejections``, ``quarantine``), so kernel items and engine
items (kind ``engine``, same columns) enter studies the same way. A quarantined item leaves a quarantine row
(its numbers) and a rejections row (its verdict); it is one attempt.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Optional


@dataclass(frozen=True)
class Attempt:
    """One iteration's outcome for one problem in one arm."""

    arm: str
    iteration: Optional[int]
    problem: str
    candidate: str
    candidate_sha256: Optional[str]
    verdict: str  # accepted | rejected | quarantined | error
    gate: Optional[str]
    kind: str
    run_id: str
    order: int  # store order (row id within its table, results first): breaks ties between equal iterations
    speedup: Optional[float] = None
    ci_low: Optional[float] = None
    ci_high: Optional[float] = None
    candidate_s: Optional[float] = None
    baseline_s: Optional[float] = None
    reason: str = ""
    ref: str = ""  # "results:<id>" / "rejections:<id>"
    exploratory: bool = False  # measured in a run under an unfrozen protocol

    @property
    def usable(self) -> bool:
        """An iteration is usable when it produced an accepted measurement."""
        return self.verdict == "accepted" and self.speedup is not None

    def to_json(self) -> dict:
        return {"arm": self.arm, "iteration": self.iteration, "problem": self.problem, "candidate": self.candidate,
                "candidate_sha256": self.candidate_sha256, "verdict": self.verdict, "gate": self.gate,
                "kind": self.kind, "run_id": self.run_id, "speedup": self.speedup,
                "ci": [self.ci_low, self.ci_high] if self.speedup is not None else None,
                "candidate_s": self.candidate_s, "baseline_s": self.baseline_s, "reason": self.reason,
                "ref": self.ref}


def attempts_from_rows(results: Iterable[dict], rejections: Iterable[dict], quarantine: Iterable[dict] = ()
                       ) -> list[Attempt]:
    """Attempts from a study's rows (as :func:`pytest_autotune.store.studies.study_rows` returns them)."""
    q_by_item = {(q["run_id"], q["nodeid"]): q for q in quarantine}
    out: list[Attempt] = []
    for r in results:
        out.append(Attempt(
            arm=r["arm"], iteration=r["iteration"], problem=r["problem"], candidate=r["candidate"],
            candidate_sha256=r["candidate_sha256"], verdict="accepted", gate=None, kind=r["kind"],
            run_id=r["run_id"], order=int(r["id"]), speedup=float(r["speedup"]), ci_low=float(r["ci_low"]),
            ci_high=float(r["ci_high"]), candidate_s=float(r["candidate_s"]), baseline_s=float(r["baseline_s"]),
            ref=f"results:{r['id']}", exploratory=bool(r.get("run_exploratory", r.get("exploratory")))))
    for j in rejections:
        q = q_by_item.get((j["run_id"], j["nodeid"])) if j["verdict"] == "quarantined" else None
        out.append(Attempt(
            arm=j["arm"], iteration=j["iteration"], problem=j["problem"], candidate=j["candidate"],
            candidate_sha256=j.get("candidate_sha256") or (q["candidate_sha256"] if q else None),
            verdict=j["verdict"], gate=j["gate"], kind=(q["kind"] if q else "kernel"), run_id=j["run_id"],
            order=10**9 + int(j["id"]), speedup=None,
            ci_low=None, ci_high=None, candidate_s=float(q["candidate_s"]) if q else None,
            baseline_s=float(q["baseline_s"]) if q else None, reason=str(j["detail"])[:300],
            ref=f"rejections:{j['id']}", exploratory=bool(j.get("run_exploratory"))))
    return sorted(out, key=lambda a: (a.arm, a.problem, a.iteration if a.iteration is not None else 10**9, a.order))
