"""A study's verdict (docs/guide/studies.md), from its attempts, its registration and its call logs.

In order, the first that applies:

1. ``void: treatment not delivered (...)`` -- the arms were not given different treatments (delivery.py).
2. ``below usability bar (...)`` -- an arm has fewer usable iterations than its registered bar, or a smaller
   share of usable iterations than the protocol's ``[studies].min_usable_fraction``. Such an arm is reported as
   such and never compared.
3. ``incomplete (...)`` -- fewer problems with a usable result in both arms than the registered ``pairs``.
4. ``saturated at <wall>`` -- on every pair, both arms reached their best (within the saturation band) at their
   first iteration, and the two bests are within the band of each other: the task sits at a shared wall (the
   best candidate's time per call), so the comparison cannot tell the arms apart. Never "no difference".
5. ``supported`` / ``not supported`` -- the geometric mean over pairs of treatment/control best speedups (or
   control/treatment, direction "lower") reaches the success bar and lies outside the saturation band.

The label adds ``exploratory: `` in front when the study was not registered before its first row, or its entry
changed since (or is gone), and `` [plumbing suspect]`` after when an arm's call log exceeds the protocol's
thresholds. Only the registered arms, problems and iterations are compared; anything else is listed as excluded.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, Optional, Sequence

from ..protocol import Protocol
from .attempts import Attempt
from .audit import AuditReport
from .delivery import Delivery, check_delivery
from .registry import StudyEntry
from .trajectory import Trajectory, build_trajectory, format_seconds, within_band


@dataclass(frozen=True)
class ArmSummary:
    arm: str
    usable: int
    total: int
    min_usable: int
    min_fraction: float
    trajectories: tuple[Trajectory, ...]

    @property
    def fraction(self) -> float:
        return self.usable / self.total if self.total else 0.0

    @property
    def below_bar(self) -> Optional[str]:
        if self.total == 0:
            return f"arm {self.arm} has no iterations"
        if self.usable < self.min_usable:
            return f"arm {self.arm}: {self.usable} of {self.total} iterations usable, registered bar {self.min_usable}"
        if self.fraction < self.min_fraction:
            return (f"arm {self.arm}: {self.usable} of {self.total} iterations usable ({self.fraction:.0%}), below "
                    f"the protocol's {self.min_fraction:.0%}")
        return None

    def to_json(self, band: float) -> dict:
        return {"arm": self.arm, "usable": self.usable, "total": self.total, "min_usable": self.min_usable,
                "usable_fraction": self.fraction, "below_bar": self.below_bar,
                "trajectories": [t.to_json(band) for t in self.trajectories]}


@dataclass(frozen=True)
class PairResult:
    problem: str
    treatment: Trajectory
    control: Trajectory
    ratio: float  # registered direction: > 1 favours the treatment
    conservative_ratio: float  # the same from the CI ends least favourable to the treatment
    saturated: bool
    wall_s: Optional[float]

    def to_json(self) -> dict:
        t, c = self.treatment.best, self.control.best
        return {"problem": self.problem, "ratio": self.ratio, "conservative_ratio": self.conservative_ratio,
                "saturated": self.saturated, "wall_s": self.wall_s,
                "treatment_best": t.to_json() if t else None, "control_best": c.to_json() if c else None}


@dataclass
class StudyReport:
    study: str
    arms: tuple[str, ...]
    registered: bool
    exploratory_reasons: list[str]
    entry: Optional[StudyEntry]
    entry_sha256: Optional[str]
    registration: Optional[dict]
    summaries: list[ArmSummary]
    pairs: list[PairResult]
    delivery: Delivery
    audits: dict[str, AuditReport]
    verdict: str
    reasons: list[str]
    excluded: list[str]
    band: float
    geomean_ratio: Optional[float] = None
    notes: list[str] = field(default_factory=list)

    @property
    def exploratory(self) -> bool:
        return bool(self.exploratory_reasons)

    @property
    def plumbing_suspect(self) -> bool:
        return any(a.flagged for a in self.audits.values())

    @property
    def label(self) -> str:
        return (("exploratory: " if self.exploratory else "") + self.verdict
                + (" [plumbing suspect]" if self.plumbing_suspect else ""))

    def to_json(self) -> dict:
        e = self.entry
        return {
            "study": self.study, "label": self.label, "verdict": self.verdict, "exploratory": self.exploratory,
            "exploratory_reasons": list(self.exploratory_reasons), "plumbing_suspect": self.plumbing_suspect,
            "reasons": list(self.reasons), "excluded": list(self.excluded), "notes": list(self.notes),
            "registration": ({k: v for k, v in self.registration.items() if k not in ("entry",)}
                             if self.registration else None),
            "entry_sha256": self.entry_sha256,
            "entry": ({"hypothesis": e.hypothesis, "arms": list(e.arms), "metric": e.metric,
                       "direction": e.direction, "min_usable": dict(e.min_usable), "success_bar": e.success_bar,
                       "pairs": e.pairs, "problems": list(e.problems) if e.problems else None,
                       "iterations": e.iterations} if e else None),
            "arms": [s.to_json(self.band) for s in self.summaries],
            "pairs": [p.to_json() for p in self.pairs], "geomean_ratio": self.geomean_ratio,
            "saturation_band": self.band, "delivery": self.delivery.to_json(),
            "audits": {arm: a.to_json() for arm, a in self.audits.items()},
        }

    def render(self) -> str:
        lines = [f"study {self.study}: {self.label}"]
        if self.entry is not None:
            e = self.entry
            lines.append(f"  hypothesis: {e.hypothesis}")
            lines.append(f"  arms: {e.treatment} (treatment) vs {e.control} (control); metric {e.metric}, "
                         f"direction {e.direction}, success bar {e.success_bar:g}, pairs {e.pairs}")
        reg = self.registration
        if reg is not None:
            lines.append(f"  registration: {reg['status']} ({reg['detail']})")
        for r in self.exploratory_reasons:
            lines.append(f"  EXPLORATORY: {r}")
        for s in self.summaries:
            flag = "  BELOW USABILITY BAR" if s.below_bar else ""
            lines.append(f"  arm {s.arm}: {s.usable}/{s.total} iterations usable (bar {s.min_usable}){flag}")
            for t in s.trajectories:
                series = " ".join(
                    f"{p.iteration}:" + (f"{p.best_so_far.speedup:.2f}" if p.best_so_far and p.best_so_far.speedup
                                         else "-") + ("" if p.usable else "(x)") for p in t.points)
                b = t.best
                final = (f"final {b.speedup:.3f}x [{b.ci_low:.3f}, {b.ci_high:.3f}] at "
                         f"{format_seconds(b.candidate_s)} ({b.candidate})" if b else "no usable iteration")
                lines.append(f"    {t.problem}: best so far after each iteration ((x): unusable): {series}")
                lines.append(f"      {final}")
                refused = [f"{p.iteration} {a.verdict} by {a.gate}" for p in t.points if not p.usable
                           for a in p.attempts]
                if refused:
                    lines.append(f"      unusable: {'; '.join(refused)}")
        if self.pairs:
            for p in self.pairs:
                lines.append(f"  pair {p.problem}: treatment/control {p.ratio:.3f} (conservative "
                             f"{p.conservative_ratio:.3f})" + (f", saturated at {format_seconds(p.wall_s)}"
                                                               if p.saturated else ""))
        d = self.delivery
        lines.append("  treatment delivery: " + ("delivered (" + "; ".join(
            f"{e.arm}: {len(set(e.digests))} candidate(s)" + (f", marker in {e.calls_with_marker}/{e.calls} calls"
                                                               if e.marker else "") for e in d.evidence) + ")"
            if d.delivered else "NOT DELIVERED: " + "; ".join(d.problems)))
        for arm, a in self.audits.items():
            lines.append(f"  plumbing audit {arm} ({a.path}): " + ("SUSPECT: " + "; ".join(a.flags())
                                                                   if a.flagged else f"ok ({a.overall.calls} calls)"))
        for r in self.reasons:
            lines.append(f"  why: {r}")
        for x in self.excluded:
            lines.append(f"  excluded: {x}")
        for n in self.notes:
            lines.append(f"  note: {n}")
        return "\n".join(lines)


def _geomean(xs: Sequence[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def judge(study: str, attempts: Sequence[Attempt], protocol: Protocol, *, entry: Optional[StudyEntry],
          entry_sha256: Optional[str], registration: Optional[dict], logs: Mapping[str, AuditReport],
          entry_problem: Optional[str] = None) -> StudyReport:
    """The verdict of ``study``. ``entry`` is the registry entry as it reads now (None: none), ``registration`` the
    ``study_registrations`` row recorded at the study's first row (None: none)."""
    band = protocol.bands.saturation
    excluded: list[str] = []
    notes: list[str] = []
    # ---- pre-registration: what makes the verdict exploratory
    why: list[str] = []
    if entry_problem:
        why.append(entry_problem)
    if registration is None:
        why.append("no registration was recorded for this study (its rows predate studies, or the store was edited)")
    elif registration["status"] != "registered":
        why.append(f"not registered before its first result: {registration['detail']}")
    elif entry is None:
        why.append(f"its registry entry is gone from {registration['registry']} (it was registered as "
                   f"{str(registration['entry_sha256'])[:12]}...)")
    elif entry_sha256 != registration["entry_sha256"]:
        why.append(f"its entry in {registration['registry']} was edited after the study's first result (registered "
                   f"{str(registration['entry_sha256'])[:12]}..., now {str(entry_sha256)[:12]}...)")
    registered = not why
    # ---- arms, iterations, problems
    seen_arms: list[str] = []
    for a in sorted(attempts, key=lambda a: a.order):
        if a.arm not in seen_arms:
            seen_arms.append(a.arm)
    if entry is not None:
        arms: tuple[str, ...] = entry.arms
        min_usable = dict(entry.min_usable)
    else:
        arms = tuple(seen_arms[:2])
        min_usable = {a: 1 for a in arms}
        if len(seen_arms) > 2:
            notes.append(f"unregistered study with {len(seen_arms)} arms: compared the first two recorded "
                         f"({', '.join(arms)})")
    for extra in [a for a in seen_arms if a not in arms]:
        excluded.append(f"arm {extra} is not a registered arm of this study: not compared")
    used = [a for a in attempts if a.arm in arms]
    if entry is not None and entry.iterations is not None:
        late = [a for a in used if a.iteration is not None and a.iteration > entry.iterations]
        if late:
            excluded.append(f"{len(late)} attempt(s) after the registered {entry.iterations} iterations per arm")
        used = [a for a in used if a not in late]
    unfrozen = sum(1 for a in used if a.exploratory)
    if unfrozen:
        why.append(f"{unfrozen} of its row(s) were measured under an unfrozen protocol (exploratory runs)")
    problems = list(entry.problems) if entry is not None and entry.problems else sorted({a.problem for a in used})
    for p in sorted({a.problem for a in used} - set(problems)):
        excluded.append(f"problem {p} is not a registered problem of this study")
    used = [a for a in used if a.problem in problems]
    summaries: list[ArmSummary] = []
    for arm in arms:
        trajs = tuple(build_trajectory(arm, p, used) for p in problems)
        trajs = tuple(t for t in trajs if t.total)
        summaries.append(ArmSummary(arm, sum(t.usable for t in trajs), sum(t.total for t in trajs),
                                    min_usable.get(arm, 1), protocol.studies.min_usable_fraction, trajs))
    markers = dict(entry.markers) if entry is not None else {}
    delivery = check_delivery(arms, used, markers, logs)
    reasons: list[str] = []
    pairs: list[PairResult] = []
    geomean: Optional[float] = None

    def report(verdict: str) -> StudyReport:
        return StudyReport(study, arms, registered, why, entry, entry_sha256, registration, summaries, pairs,
                           delivery, dict(logs), verdict, reasons, excluded, band, geomean, notes)

    if len(arms) < 2:
        reasons.append(f"a comparison needs two arms; the study has {len(arms)} ({', '.join(arms) or 'none'})")
        return report(f"incomplete (needs two arms, has {len(arms)})")
    # ---- 1. delivery
    if not delivery.delivered:
        reasons += list(delivery.problems)
        return report("void: treatment not delivered (" + "; ".join(delivery.problems) + ")")
    # ---- 2. usability
    below = [s.below_bar for s in summaries if s.below_bar]
    if below:
        reasons += below  # type: ignore[arg-type]
        return report("below usability bar (" + "; ".join(below) + ")")  # type: ignore[arg-type]
    # ---- 3. pairs
    by = {(s.arm, t.problem): t for s in summaries for t in s.trajectories}
    direction = entry.direction if entry is not None else "higher"
    treatment, control = arms[0], arms[1]
    for p in problems:
        t, c = by.get((treatment, p)), by.get((control, p))
        if t is None or c is None or t.best is None or c.best is None:
            continue
        tb, cb = t.best, c.best
        assert tb.speedup and cb.speedup and tb.ci_low and tb.ci_high and cb.ci_low and cb.ci_high
        if direction == "higher":
            ratio, cons = tb.speedup / cb.speedup, tb.ci_low / cb.ci_high
        else:
            ratio, cons = cb.speedup / tb.speedup, cb.ci_low / tb.ci_high
        sat = (t.reached_best_at(band) == t.first_iteration and c.reached_best_at(band) == c.first_iteration
               and within_band(tb.speedup, cb.speedup, band))
        wall = None
        if tb.candidate_s and cb.candidate_s:
            wall = math.sqrt(tb.candidate_s * cb.candidate_s)
        pairs.append(PairResult(p, t, c, ratio, cons, sat, wall))
    needed = entry.pairs if entry is not None else max(1, len(problems))
    if len(pairs) < needed:
        missing = [p for p in problems if p not in {x.problem for x in pairs}]
        reasons.append(f"{len(pairs)} of {needed} registered pair(s) have a usable result in both arms"
                       + (f" (missing: {', '.join(missing)})" if missing else ""))
        return report(f"incomplete ({len(pairs)} of {needed} pairs)")
    # ---- 4. saturation
    if all(p.saturated for p in pairs):
        walls = [f"{format_seconds(p.wall_s)}" + (f" ({p.problem})" if len(pairs) > 1 else "") for p in pairs]
        reasons.append(f"both arms reached their best at their first iteration and the bests are within "
                       f"±{band:.0%} of each other: the task is saturated, the arms cannot be told apart here")
        return report("saturated at " + ", ".join(walls))
    sat_pairs = [p.problem for p in pairs if p.saturated]
    if sat_pairs:
        notes.append(f"saturated pair(s) {', '.join(sat_pairs)} are part of the comparison")
    # ---- 5. the comparison
    geomean = _geomean([p.ratio for p in pairs])
    bar = entry.success_bar if entry is not None else 1.0 + band
    if geomean >= bar and not within_band(geomean, 1.0, band):
        reasons.append(f"treatment/control {geomean:.3f} (geometric mean over {len(pairs)} pair(s)) reaches the "
                       f"success bar {bar:g} and lies outside the ±{band:.0%} noise band")
        return report("supported")
    reasons.append(f"treatment/control {geomean:.3f} (geometric mean over {len(pairs)} pair(s)) "
                   + ("is below the success bar " + f"{bar:g}" if geomean < bar else
                      f"is within the ±{band:.0%} noise band"))
    return report("not supported")
