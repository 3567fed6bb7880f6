"""The CI options (docs/guide/ci.md), read once into a typed record."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import pytest

from .compare import parse_margin


def _margin(value: str) -> float:
    try:
        return parse_margin(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r}: give a percentage in [0, 100), e.g. 5%") from None


def add_options(group: Any) -> None:
    group.addoption("--autotune-compare", dest="autotune_compare", default=None, metavar="RUN_ID|latest|PATH.json",
                    help="compare each item's speedup with the same item (problem, candidate, device) of a stored "
                         "run: a run id or 'latest' of --autotune-db, or a JSON report (--autotune-json, autotune "
                         "export RUN --json). Refused across protocol digests, device fingerprints or torch versions.")
    group.addoption("--autotune-fail-on", dest="autotune_fail_on", default=None, choices=["regression"],
                    help="with --autotune-compare: fail an item (and the session) whose speedup regressed beyond "
                         "noise: new CI upper end < stored CI lower end x (1 - margin) (docs/guide/ci.md).")
    group.addoption("--autotune-fail-margin", dest="autotune_fail_margin", default=0.0, type=_margin, metavar="P%",
                    help="minimum effect for --autotune-fail-on=regression, e.g. 5%% (default 0%%).")
    group.addoption("--autotune-changed-only", dest="autotune_changed_only", action="store_true", default=False,
                    help="with --autotune-base=REF: collect only the candidates whose files changed since REF (the "
                         "others are deselected, and not reported missing by --autotune-compare).")
    group.addoption("--autotune-md", dest="autotune_md", default=None, metavar="PATH",
                    help="write a Markdown summary (old vs new speedup [CI], verdict per item) to PATH; also appended "
                         "to $GITHUB_STEP_SUMMARY when that is set.")


@dataclass(frozen=True)
class CIOptions:
    compare: Optional[str]
    fail_on: Optional[str]
    margin: float
    md: Optional[Path]
    changed_only: bool = False

    @classmethod
    def from_config(cls, config: pytest.Config) -> "CIOptions":
        g = config.getoption
        md = g("autotune_md")
        return cls(compare=g("autotune_compare"), fail_on=g("autotune_fail_on"),
                   margin=float(g("autotune_fail_margin") or 0.0),
                   md=Path(md).expanduser().resolve() if md else None,
                   changed_only=bool(g("autotune_changed_only")))
