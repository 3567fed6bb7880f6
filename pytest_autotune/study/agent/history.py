"""What the model is told about its earlier iterations, and what the search prints at its end: each iteration's
outcome, read from the measuring session's JSON report (the speedup with its CI, or the refusal with its gate and
reason) or known without measuring (an unusable reply)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

from ..trajectory import format_seconds

#: how much of a refusal's reason the prompt repeats
REASON_CHARS = 600


@dataclass(frozen=True)
class IterationOutcome:
    iteration: int
    name: str
    verdict: str  # accepted | rejected | quarantined | error | unusable | not measured
    gate: Optional[str] = None
    reason: str = ""
    speedup: Optional[float] = None
    ci: Optional[tuple[float, float]] = None
    baseline: Optional[str] = None
    candidate_s: Optional[float] = None
    baseline_s: Optional[float] = None
    artifact: Optional[str] = None  # the candidate's code (or flag set as JSON), for the best-so-far excerpt
    build_log: str = ""  # a build that failed: the compilers' output (the report's details.build.log)

    @property
    def usable(self) -> bool:
        return self.verdict == "accepted" and self.speedup is not None

    def describe(self) -> str:
        head = f"iteration {self.iteration} ({self.name}): "
        if self.usable and self.ci is not None:
            times = (f" ({format_seconds(self.candidate_s)} per call against {format_seconds(self.baseline_s)})"
                     if self.candidate_s and self.baseline_s else "")
            return (head + f"accepted, {self.speedup:.3f}x [95% CI {self.ci[0]:.3f}, {self.ci[1]:.3f}] against the "
                    f"frozen baseline {self.baseline or 'reference'}{times}")
        why = " ".join(self.reason.split())
        if len(why) > REASON_CHARS:
            why = why[:REASON_CHARS] + " [...]"
        if self.verdict == "unusable":
            return head + f"UNUSABLE (gate reply), not measured: {why}"
        if self.verdict == "not measured":
            return head + f"NOT MEASURED: {why}"
        return head + f"{self.verdict.upper()} by the {self.gate} gate: {why}"


    def compiler_output(self) -> str:
        """For the prompt: the compilers' messages of a build that failed (their commands left out), or ""."""
        if self.gate != "build" or not self.build_log:
            return ""
        from ...build.compiler_log import excerpt

        return f"\n  The compiler's output:\n```text\n{excerpt(self.build_log, LOG_CHARS)}\n```"


#: how much of a failed build's output the prompt repeats
LOG_CHARS = 2000


def from_report(report: Path, problem: str, name: str, iteration: int, artifact: Optional[str],
                rc: int) -> IterationOutcome:
    """The outcome of candidate ``name`` in a measuring session's JSON report."""
    try:
        rep = json.loads(report.read_text())
    except (OSError, ValueError):
        rep = {}
    for item in rep.get("items", []) if isinstance(rep, dict) else []:
        if item.get("problem") == problem and item.get("candidate") == name:
            return _outcome(item, iteration, name, artifact)
    return IterationOutcome(iteration, name, "not measured", None,
                            f"the measuring session (pytest exit {rc}) reported nothing for it", artifact=artifact)


def _outcome(item: dict[str, Any], iteration: int, name: str, artifact: Optional[str]) -> IterationOutcome:
    ci = item.get("ci")
    build = (item.get("details") or {}).get("build") or {}
    return IterationOutcome(
        iteration, name, str(item.get("verdict")), item.get("gate"), str(item.get("reason") or ""),
        item.get("speedup") if item.get("verdict") == "accepted" else None,
        (float(ci[0]), float(ci[1])) if isinstance(ci, list) and len(ci) == 2 and None not in ci else None,
        item.get("baseline"), item.get("candidate_s"), item.get("baseline_s"), artifact,
        str(build.get("log") or "") if item.get("gate") == "build" else "")


def best(history: Sequence[IterationOutcome]) -> Optional[IterationOutcome]:
    usable = [h for h in history if h.usable]
    return max(usable, key=lambda h: h.speedup or 0.0) if usable else None
