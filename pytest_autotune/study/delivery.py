"""The treatment-delivery checkpoint (docs/guide/studies.md).

A comparison of two arms means something only if the arms received different treatments. The evidence:

* kernels (and engine configurations): the digests of the candidates each arm produced, refused ones included
  (``candidate_sha256`` on results, quarantine and rejections rows). Two arms with byte-identical candidate sets
  did not receive different treatments, whatever their labels say.
* agents: an arm marker in the model-call log -- a string the arm's treatment puts into every request (the tool's
  name, a system-prompt line). Each call of an arm must carry its own marker and none of the other arm's; and two
  arms whose logs hold byte-identical answers (same sequence) got the same treatment.

Any failure makes the comparison "void: treatment not delivered (<why>)".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Optional, Sequence

from .attempts import Attempt
from .audit import AuditReport


@dataclass(frozen=True)
class ArmEvidence:
    arm: str
    digests: tuple[str, ...]  # candidate digests in order of iteration (refused ones included)
    attempts_without_digest: int
    marker: Optional[str] = None
    calls: int = 0
    calls_with_marker: int = 0
    calls_with_other_marker: int = 0
    log_digest: Optional[str] = None

    def to_json(self) -> dict:
        return {"arm": self.arm, "candidates": len(set(self.digests)), "candidate_sha256": sorted(set(self.digests)),
                "attempts_without_digest": self.attempts_without_digest, "marker": self.marker,
                "calls": self.calls, "calls_with_marker": self.calls_with_marker,
                "calls_with_other_marker": self.calls_with_other_marker, "log_sha256": self.log_digest}


@dataclass(frozen=True)
class Delivery:
    evidence: tuple[ArmEvidence, ...]
    problems: tuple[str, ...] = field(default_factory=tuple)  # why the treatment was not delivered

    @property
    def delivered(self) -> bool:
        return not self.problems

    def to_json(self) -> dict:
        return {"delivered": self.delivered, "problems": list(self.problems),
                "arms": [e.to_json() for e in self.evidence]}


def check_delivery(arms: Sequence[str], attempts: Sequence[Attempt], markers: Mapping[str, str],
                   logs: Mapping[str, AuditReport]) -> Delivery:
    evidence: list[ArmEvidence] = []
    problems: list[str] = []
    for arm in arms:
        mine = [a for a in attempts if a.arm == arm]
        digests = tuple(a.candidate_sha256 for a in mine if a.candidate_sha256)
        marker = markers.get(arm)
        log = logs.get(arm)
        others = [markers[o] for o in arms if o != arm and o in markers]
        with_marker = with_other = 0
        if log is not None:
            with_marker = sum(1 for c in log.calls if marker and marker in c.raw)
            with_other = sum(1 for c in log.calls if any(m in c.raw for m in others))
        evidence.append(ArmEvidence(arm, digests, sum(1 for a in mine if not a.candidate_sha256), marker,
                                    len(log.calls) if log else 0, with_marker, with_other,
                                    log.content_digest() if log else None))
    by_arm = {e.arm: e for e in evidence}
    for e in evidence:
        n_attempts = sum(1 for a in attempts if a.arm == e.arm)
        if n_attempts and not e.digests:
            problems.append(f"arm {e.arm} recorded no candidate digest in {n_attempts} attempt(s): nothing shows "
                            "what it measured")
        if e.marker is not None:
            if logs.get(e.arm) is None:
                problems.append(f"arm {e.arm} registers the marker {e.marker!r} but no call log was given for it "
                                "(registry calls, or --calls ARM=PATH)")
            elif e.calls == 0:
                problems.append(f"arm {e.arm}: its call log holds no calls")
            elif e.calls_with_marker < e.calls:
                problems.append(f"arm {e.arm}: its marker {e.marker!r} is missing from {e.calls - e.calls_with_marker} "
                                f"of {e.calls} call(s)")
        if e.calls_with_other_marker:
            problems.append(f"arm {e.arm}: {e.calls_with_other_marker} call(s) carry another arm's marker (the arms "
                            "were mixed)")
    if len(arms) == 2:
        a, b = (by_arm[x] for x in arms)
        if a.digests and set(a.digests) == set(b.digests):
            same_order = a.digests == b.digests
            problems.append(f"arms {a.arm} and {b.arm} measured byte-identical candidate sets "
                            f"({len(set(a.digests))} candidate(s){', in the same order' if same_order else ''})")
        if a.log_digest is not None and a.log_digest == b.log_digest and a.calls:
            problems.append(f"arms {a.arm} and {b.arm} have byte-identical call logs ({a.calls} answers)")
    return Delivery(tuple(evidence), tuple(problems))
