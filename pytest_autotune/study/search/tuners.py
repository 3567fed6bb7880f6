"""Tuners: what proposes the next candidates of an arm (``autotune search --tuner=NAME``).

The seam: a :class:`Tuner` proposes points of a search space; the runner turns each into a candidate file and
measures it through the same gates as any other candidate. ``random`` (seeded, uniform, without replacement) is
the baseline every other tuner is compared with. ``llm`` (:mod:`pytest_autotune.study.agent`, docs/guide/llm-tuner.md) is
adaptive and writes candidate code (or engine flag sets) itself, one measured iteration at a time. Other tuners
register through the entry-point group ``pytest_autotune.tuners`` (``name = "package.module:TunerClass"``).
"""

from __future__ import annotations

from typing import Sequence

from ...errors import AutotuneUsageError
from .space import Point, SearchSpace
from .tuner_base import Trial, Tuner

__all__ = ["BUILTIN", "ENTRY_POINT_GROUP", "RandomTuner", "Trial", "Tuner", "tuner_class"]

ENTRY_POINT_GROUP = "pytest_autotune.tuners"


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
    if name == "llm":  # built in, imported on demand (the openai client is imported only when it calls)
        from ..agent.tuner import LlmTuner

        return LlmTuner
    from importlib.metadata import entry_points

    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name == name:
            cls = ep.load()
            if not (isinstance(cls, type) and issubclass(cls, Tuner)):
                raise AutotuneUsageError(f"tuner {name!r} ({ep.value}) is not a pytest_autotune Tuner subclass")
            return cls
    raise AutotuneUsageError(f"--tuner={name}: unknown tuner; built in: {', '.join(sorted([*BUILTIN, 'llm']))} (others register "
                             f"under the entry-point group {ENTRY_POINT_GROUP})")
