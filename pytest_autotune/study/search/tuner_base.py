"""The tuner seam's base class (``autotune search --tuner=NAME``): a leaf module, so that tuners living elsewhere
(the LLM tuner in :mod:`pytest_autotune.study.agent`) and the registry in :mod:`.tuners` both import it and not
each other."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Optional, Sequence

from .space import Point, SearchSpace


@dataclass(frozen=True)
class Trial:
    """A measured point (what an adaptive tuner learns from)."""

    iteration: int
    point: Point
    verdict: str
    speedup: Optional[float]


class Tuner(ABC):
    name: str = ""
    #: an adaptive tuner proposes one candidate at a time and sees every earlier outcome (``autotune search`` then
    #: measures each iteration before asking for the next); a non-adaptive one proposes its whole budget at once
    #: (measured in one session)
    adaptive: bool = False
    #: a tuner that writes candidate code (or engine flag sets) itself rather than points of a template's space
    #: (the LLM tuner): it needs no template, and the adaptive loop of :mod:`pytest_autotune.study.agent` drives it
    writes_code: bool = False

    def __init__(self, seed: int, options: Optional[dict[str, Any]] = None) -> None:
        self.seed = seed
        self.options = dict(options or {})

    @abstractmethod
    def propose(self, space: SearchSpace, budget: int, history: Sequence[Trial]) -> list[Point]:
        """Points to measure next (``budget`` of them for a non-adaptive tuner)."""
