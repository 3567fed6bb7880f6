"""Trajectories: per arm and problem, the iterations in order, which were usable, and the best-so-far honest
speedup after each (docs/guide/studies.md)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable, Optional

from .attempts import Attempt


@dataclass(frozen=True)
class IterationPoint:
    """One iteration of one arm on one problem: its attempts, and the best-so-far after it."""

    iteration: int  # the recorded iteration, or the attempt's position (1, 2, ...) when none was recorded
    attempts: tuple[Attempt, ...]
    best_so_far: Optional[Attempt]  # the best usable attempt up to and including this iteration

    @property
    def usable(self) -> bool:
        return any(a.usable for a in self.attempts)

    @property
    def best_here(self) -> Optional[Attempt]:
        usable = [a for a in self.attempts if a.usable]
        return max(usable, key=lambda a: a.speedup or 0.0) if usable else None

    def to_json(self) -> dict:
        b = self.best_so_far
        here = self.best_here
        return {"iteration": self.iteration, "usable": self.usable,
                "speedup": here.speedup if here else None,
                "best_so_far": b.speedup if b else None, "best_so_far_ci": [b.ci_low, b.ci_high] if b else None,
                "refusals": [{"verdict": a.verdict, "gate": a.gate, "candidate": a.candidate, "reason": a.reason}
                             for a in self.attempts if not a.usable]}


@dataclass(frozen=True)
class Trajectory:
    arm: str
    problem: str
    points: tuple[IterationPoint, ...] = field(default_factory=tuple)

    @property
    def total(self) -> int:
        return len(self.points)

    @property
    def usable(self) -> int:
        return sum(1 for p in self.points if p.usable)

    @property
    def best(self) -> Optional[Attempt]:
        """The final best-so-far: the best usable attempt of the whole trajectory."""
        return self.points[-1].best_so_far if self.points else None

    @property
    def first_iteration(self) -> Optional[int]:
        return self.points[0].iteration if self.points else None

    def reached_best_at(self, band: float) -> Optional[int]:
        """The first iteration whose own best is within ``band`` of the final best (``>= best / (1 + band)``): where
        the arm stopped improving beyond noise."""
        best = self.best
        if best is None or best.speedup is None:
            return None
        floor = best.speedup / (1.0 + band)
        for p in self.points:
            here = p.best_here
            if here is not None and here.speedup is not None and here.speedup >= floor:
                return p.iteration
        return None  # pragma: no cover - the best itself qualifies

    def to_json(self, band: float) -> dict:
        b = self.best
        return {"arm": self.arm, "problem": self.problem, "usable": self.usable, "total": self.total,
                "best": b.to_json() if b else None, "reached_best_at": self.reached_best_at(band),
                "first_iteration": self.first_iteration, "points": [p.to_json() for p in self.points]}


def build_trajectory(arm: str, problem: str, attempts: Iterable[Attempt]) -> Trajectory:
    """Group ``attempts`` (one arm, one problem) by iteration, in order. Attempts without a recorded iteration
    count as one iteration each, after the numbered ones, in the order they were recorded."""
    mine = [a for a in attempts if a.arm == arm and a.problem == problem]
    numbered = sorted({a.iteration for a in mine if a.iteration is not None})
    groups: list[tuple[int, list[Attempt]]] = [(i, [a for a in mine if a.iteration == i]) for i in numbered]
    start = (numbered[-1] + 1) if numbered else 1
    for k, a in enumerate(sorted((a for a in mine if a.iteration is None), key=lambda a: a.order)):
        groups.append((start + k, [a]))
    points = []
    best: Optional[Attempt] = None
    for it, group in groups:
        for a in sorted(group, key=lambda a: a.order):
            if a.usable and (best is None or (a.speedup or 0.0) > (best.speedup or 0.0)):
                best = a
        points.append(IterationPoint(it, tuple(sorted(group, key=lambda a: a.order)), best))
    return Trajectory(arm, problem, tuple(points))


def within_band(a: float, b: float, band: float) -> bool:
    """``a`` and ``b`` (positive) differ by at most ``band`` as a ratio either way."""
    return a > 0 and b > 0 and abs(math.log(a / b)) <= math.log1p(band) + 1e-12


def format_seconds(s: Optional[float]) -> str:
    if s is None or not math.isfinite(s):
        return "-"
    if s >= 1.0:
        return f"{s:.3g} s"
    if s >= 1e-3:
        return f"{s * 1e3:.3g} ms"
    if s >= 1e-6:
        return f"{s * 1e6:.3g} µs"
    return f"{s * 1e9:.3g} ns"
