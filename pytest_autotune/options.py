"""The plugin's command-line options, read once into a typed record (docs/architecture.md#modules-one-job-each)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import pytest


@dataclass
class Options:
    measuring: bool
    device: str
    db: Optional[Path]
    json_path: Optional[Path]
    problems: list[Path]
    candidates: list[Path]
    exploratory: bool
    aa: bool
    probe_seed: Optional[int]
    base: Optional[str]
    study: Optional[str] = None
    arm: Optional[str] = None
    iteration: Optional[int] = None
    study_registry: Optional[str] = None
    study_manifest: Optional[Path] = None
    remeasure: Optional[str] = None
    plots: Optional[Path] = None
    device_memory: Optional[int] = None
    calls_per_sample: Optional[str] = None
    #: --autotune-pairs: pairs of processes per item instead of the protocol's (None: the protocol's)
    pairs: Optional[int] = None
    #: --autotune-max-pairs: at most this many pairs of processes an item, stopping at the CI target (None: off)
    max_pairs: Optional[int] = None

    @classmethod
    def from_config(cls, config: pytest.Config) -> "Options":
        g = config.getoption
        db = g("autotune_db")
        js = g("autotune_json")
        if g("autotune_k") is not None and not g("autotune_exploratory"):
            from .errors import AutotuneUsageError

            raise AutotuneUsageError(
                f"--autotune-k={g('autotune_k')} overrides the protocol's calls per sample: add "
                "--autotune-exploratory (every row is then marked exploratory), or drop --autotune-k")
        if g("autotune_pairs") is not None and g("autotune_max_pairs") is not None:
            from .errors import AutotuneUsageError

            raise AutotuneUsageError(
                f"--autotune-pairs={g('autotune_pairs')} and --autotune-max-pairs={g('autotune_max_pairs')} both set "
                "an item's pairs of processes: keep --autotune-pairs=N to run all N, or --autotune-max-pairs=N to "
                "stop each item once its CI reaches the target")
        return cls(
            measuring=bool(g("autotune")),
            device=g("autotune_device"),
            db=Path(db).expanduser().resolve() if db else Path(config.rootpath) / ".autotune" / "results.db",
            json_path=Path(js).expanduser().resolve() if js else None,
            problems=[Path(p).expanduser().resolve() for p in (g("autotune_problems") or [])],
            candidates=[Path(p).expanduser().resolve() for p in (g("autotune_candidates") or [])],
            exploratory=bool(g("autotune_exploratory")),
            aa=bool(g("autotune_aa")),
            probe_seed=g("autotune_probe_seed"),
            base=g("autotune_base"),
            study=g("autotune_study"),
            arm=g("autotune_arm"),
            iteration=g("autotune_iteration"),
            study_registry=g("autotune_study_registry"),
            study_manifest=Path(g("autotune_study_manifest")).expanduser().resolve()
            if g("autotune_study_manifest") else None,
            remeasure=g("autotune_remeasure"),
            plots=Path(g("autotune_plots")).expanduser().resolve() if g("autotune_plots") else None,
            device_memory=g("autotune_device_memory"),
            calls_per_sample=g("autotune_k"),
            pairs=g("autotune_pairs"),
            max_pairs=g("autotune_max_pairs"),
        )
