"""Tuners: what proposes the next candidates of an arm (``autotune search --tuner=NAME``).

The seam: a :class:`Tuner` proposes points of a search space; the runner turns each into a candidate file and
measures it through the same gates as any other candidate. ``random`` (seeded, uniform, without replacement) is
the baseline every other tuner is compared with. Other tuners (an LLM tuner, which needs an endpoint and a model
and writes candidate code rather than points) register through the entry-point group ``pytest_autotune.tuners``
(``name = "package.module:TunerClass"``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Optional, Sequence

from ...errors import AutotuneUsageError
from .space import Point, SearchSpace

ENTRY_POINT_GROUP = "pytest_autotune.tuners"


@dataclass(frozen=True)
class Trial:
    """A measured point (what an adaptive tuner learns from)."""

    iteration: int
    point: Point
    verdict: str
    speedup: Optional[float]


class Tuner(ABC):
    name: str = ""
    #: an adaptive tuner proposes one point at a time and sees every earlier trial; a non-adaptive one proposes
    #: its whole budget at once (measured in one session)
    adaptive: bool = False

    def __init__(self, seed: int, options: Optional[dict[str, Any]] = None) -> None:
        self.seed = seed
        self.options = dict(options or {})

    @abstractmethod
    def propose(self, space: SearchSpace, budget: int, history: Sequence[Trial]) -> list[Point]:
        """Points to measure next (``budget`` of them for a non-adaptive tuner)."""


class RandomTuner(Tuner):
    """Seeded random search: ``budget`` distinct points, uniform over the space. The same seed and space give the
    same candidates, byte for byte."""

    name = "random"

    def propose(self, space: SearchSpace, budget: int, history: Sequence[Trial]) -> list[Point]:
        return space.sample(budget, self.seed)


BUILTIN: dict[str, type[Tuner]] = {"random": RandomTuner}


def tuner_class(name: str) -> type[Tuner]:
    if name in BUILTIN:
        return BUILTIN[name]
    from importlib.metadata import entry_points

    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name == name:
            cls = ep.load()
            if not (isinstance(cls, type) and issubclass(cls, Tuner)):
                raise AutotuneUsageError(f"tuner {name!r} ({ep.value}) is not a pytest_autotune Tuner subclass")
            return cls
    if name == "llm":
        raise AutotuneUsageError(
            "--tuner=llm: no LLM tuner is installed. The seam is pytest_autotune.study.search.tuners.Tuner: an LLM "
            "tuner (adaptive, --endpoint/--model of an OpenAI-compatible server) registers under the entry-point "
            f"group {ENTRY_POINT_GROUP}; its model calls belong in a CALLS.jsonl for autotune audit")
    raise AutotuneUsageError(f"--tuner={name}: unknown tuner; built in: {', '.join(sorted(BUILTIN))} (others register "
                             f"under the entry-point group {ENTRY_POINT_GROUP})")
