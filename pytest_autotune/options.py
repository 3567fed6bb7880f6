"""The plugin's command-line options: defined for pytest (:func:`add_options`) and read once into a typed record
(:class:`Options`; docs/architecture.md#modules-one-job-each)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import pytest

from .report.precision import MOST_PAIRS


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
    #: --autotune-strict-contract: findings beyond the contract refuse (problems/contract.py)
    strict_contract: bool = False

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
            strict_contract=bool(g("autotune_strict_contract")),
        )


def _device_choice(value: str) -> str:
    if not value or not value.replace("_", "").replace("-", "").isalnum():
        raise pytest.UsageError(f"--device={value!r}: give a device name such as cpu, cuda or mlx")
    return value


def _existing_dir(value: str) -> str:
    p = Path(value).expanduser()
    if not p.is_dir():
        import argparse

        raise argparse.ArgumentTypeError(f"{value!r} is not a directory; pass a folder of problem/candidate files")
    return value


def _iteration(value: str) -> int:
    import argparse

    try:
        v = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not an iteration number") from None
    if v < 0:
        raise argparse.ArgumentTypeError("--iteration must be >= 0")
    return v


def _size(text: str) -> int:
    import argparse

    from .measure.memory import parse_bytes

    try:
        return parse_bytes(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _k_override(value: str) -> str:
    import argparse

    from .measure.sampling import KOverride

    try:
        KOverride.parse(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return value


def _pairs(value: str) -> int:
    import argparse

    if not value.isdigit() or not 1 <= int(value) <= MOST_PAIRS:
        raise argparse.ArgumentTypeError(f"{value!r}: give a number of pairs of processes from 1 to {MOST_PAIRS}")
    return int(value)


def _seed(value: str) -> int:
    import argparse

    try:
        v = int(value, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not an integer seed") from None
    if v < 0:
        raise argparse.ArgumentTypeError("the probe seed must be >= 0")
    return v


def add_options(parser: pytest.Parser) -> None:
    g = parser.getgroup("autotune", "pytest-autotune: trustworthy kernel benchmarks")
    g.addoption("--autotune", action="store_true", default=False,
                help="time and record kernel items. Without it, items run the correctness gate and probes only "
                     "and nothing is recorded.")
    g.addoption("--device", dest="autotune_device", default="cpu", type=_device_choice, metavar="NAME",
                help="where to measure: cpu (default), cuda, mlx (the held-out retest leg), or a device "
                     "registered by the pytest_autotune_devices hook.")
    g.addoption("--autotune-db", dest="autotune_db", default=None, metavar="PATH",
                help="SQLite results store (default: .autotune/results.db under the rootdir).")
    g.addoption("--autotune-json", dest="autotune_json", default=None, metavar="PATH",
                help="write the JSON report (schema pytest-autotune/report/1) to PATH.")
    g.addoption("--problems", dest="autotune_problems", action="append", default=[], type=_existing_dir,
                metavar="DIR", help="also collect KernelBench-format problem files from DIR (repeatable).")
    g.addoption("--candidates", dest="autotune_candidates", action="append", default=[], type=_existing_dir,
                metavar="DIR", help="also collect candidates laid out as DIR/<problem_stem>/<name>.py (repeatable).")
    g.addoption("--autotune-exploratory", dest="autotune_exploratory", action="store_true", default=False,
                help="allow an unfrozen protocol.toml; every row is then marked exploratory.")
    g.addoption("--autotune-aa", dest="autotune_aa", action="store_true", default=False,
                help="add an A/A item per problem (the reference against itself: must read ~1.0x).")
    g.addoption("--autotune-base", dest="autotune_base", default=None, metavar="REF",
                help="check with git that every change since REF is inside [surface].modifiable of the protocol; "
                     "otherwise refuse to record and name the files.")
    g.addoption("--autotune-probe-seed", dest="autotune_probe_seed", default=None, type=_seed, metavar="N",
                help="replay the hypothesis cheat probes with this seed (printed when a probe fails).")
    g.addoption("--autotune-k", dest="autotune_k", default=None, type=_k_override, metavar="K",
                help="time every sample with K calls (a number, or xF: F times the protocol's choice) instead of the "
                     "protocol's k, for harness benchmarks (benchmarks/harness/k_invariance.py); needs "
                     "--autotune-exploratory, and every row is then marked exploratory.")
    g.addoption("--autotune-pairs", dest="autotune_pairs", default=None, type=_pairs, metavar="N",
                help="time every item in N pairs of processes, each with the protocol's budget of one pair "
                     "([timing].item_budget_s / [timing].process_pairs): more pairs narrow the CI, at that many "
                     "times the timing (docs/guide/precision.md). Recorded in the run's provenance.")
    g.addoption("--autotune-max-pairs", dest="autotune_max_pairs", default=None, type=_pairs, metavar="N",
                help="add pairs of processes to every item, each timed as --autotune-pairs times one, until its CI "
                     "reaches the protocol's target ([statistics].ci_target_rel_width), at most N: items that "
                     "scatter little stop early (docs/guide/precision.md#until-the-target-autotune-max-pairsn). Recorded in the "
                     "run's provenance.")
    g.addoption("--autotune-strict-contract", dest="autotune_strict_contract", action="store_true", default=False,
                help="a wrong answer on an input beyond the problem's contract (a layout it does not declare) refuses "
                     "the item instead of being reported as a finding (docs/guide/contract.md). Recorded in the run's "
                     "provenance.")
    g.addoption("--autotune-device-memory", dest="autotune_device_memory", default=None, type=_size, metavar="SIZE",
                help="plan every item's device memory with at most SIZE (e.g. 40GiB), whatever else is free: share a "
                     "GPU with other work, or give the CPU a device memory so that memory planning can be tried "
                     "there (docs/architecture.md#memory-planned-per-device).")
    # studies (docs/guide/studies.md)
    g.addoption("--study", dest="autotune_study", default=None, metavar="NAME",
                help="attach every item's result or refusal to study NAME (with --arm, and --iteration).")
    g.addoption("--arm", dest="autotune_arm", default=None, metavar="NAME", help="the study arm of these items.")
    g.addoption("--iteration", dest="autotune_iteration", default=None, type=_iteration, metavar="K",
                help="the iteration of the arm these items are (an agent's K-th attempt).")
    g.addoption("--study-registry", dest="autotune_study_registry", default=None, metavar="PATH",
                help="the study registry, relative to the rootdir (default: studies.toml).")
    g.addoption("--study-manifest", dest="autotune_study_manifest", default=None, metavar="PATH",
                help="the manifest autotune search wrote: study, arm and each generated candidate's iteration; "
                     "other candidates are deselected.")
    g.addoption("--autotune-remeasure", dest="autotune_remeasure", default=None, metavar="RUN_ID",
                help="re-time the accepted results of RUN_ID: each new result is linked to the row it re-measures; "
                     "other items are deselected (autotune remeasure runs this).")
    g.addoption("--autotune-plots", dest="autotune_plots", default=None, metavar="DIR",
                help="write PNG plots of the session to DIR (speedups with CI, A/A, transfer ratios, study "
                     "trajectories).")
    from .ci.options import add_options as add_ci_options

    add_ci_options(g)  # --autotune-compare, --autotune-fail-on, --autotune-fail-margin, --autotune-md (docs/guide/ci.md)
