"""What a session's reports are made of (docs/architecture.md#modules-one-job-each): a frozen record the session hands to
the JSON report, the terminal summary and the plots, so none of them reaches into the session."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:  # pragma: no cover
    from ..protocol import Protocol
    from ..result import ItemOutcome


@dataclass(frozen=True)
class Isolation:
    """The jail the session's sandboxes ran in, as the terminal shows it."""

    level: str  # full | partial | none
    described: str
    missing: tuple[str, ...]  # the parts of the jail this machine did not give

    @property
    def weak(self) -> bool:
        return self.level in ("partial", "none")


@dataclass(frozen=True)
class SessionSnapshot:
    run: dict[str, Any]  # the run's JSON (its stored row when recorded)
    run_id: str
    outcomes: tuple["ItemOutcome", ...]
    device: str
    measuring: bool
    recorded: bool  # a run row exists in the store
    db: Optional[Path]
    protocol: "Protocol"
    frozen: bool
    exploratory: bool
    isolation: Optional[Isolation]  # None when no sandbox was started
    studies: dict[str, Any]  # the JSON report's "studies" key (study/session_report.py)
    store_errors: tuple[str, ...]
    rootpath: Path
    #: extra top-level sections of the JSON report (pytest_autotune_report_sections: e.g. ``compare``)
    sections: dict[str, Any] = field(default_factory=dict)
