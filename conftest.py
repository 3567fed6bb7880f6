"""The root conftest: what both tests/ and benchmarks/ rely on, and nothing else.

- ``pytester``, which the project's plugin tests drive whole pytest sessions with, is loaded by ``-p pytester`` in
  pyproject.toml, not by ``pytest_plugins`` here: a test that collects the bundled benchmarks from a pytester
  directory loads this file as a non-root conftest, where pytest refuses ``pytest_plugins``.
- the ``gpu`` marker (declared in pyproject.toml): an item so marked is skipped, with the reason, where torch sees
  no CUDA device -- CI has none; the same items run on a GPU host (benchmarks/harness/gpu/run_h200.sh).
  torch is imported only when such an item was collected, so ``pytest --help`` stays light.
- the ``real_engine`` marker: an item that launches a real serving engine (vLLM's CPU build: three processes that
  each import vLLM, ~50 s a launch on 2 cores) is skipped, with the reason, unless
  ``PYTEST_AUTOTUNE_REAL_ENGINES=1``. The README's test command stays the project's test suite; CI runs these items
  in a step of their own after it, with the engine installed and required (``.ci/run``, docs/guide/engines.md#ci).
- the ``quiet_timing`` marker: a test whose assertion holds only where timing is quiet (a bound on wall time or on
  a wake-up that load can move: a correct program can fail it on a busy machine) is **deselected** from a run
  unless ``PYTEST_AUTOTUNE_QUIET_TIMING=1`` or the ``-m`` expression names the marker, so that the README's
  ``python3 -m pytest -n 2 tests`` never fails a correct program for load. ``.ci/run`` runs these tests in a step of
  their own, retried at most once (docs/results/flake-hunt.md).
"""

from __future__ import annotations

import os

import pytest

#: set to 1 to run the items marked ``real_engine`` (CI's engine step does)
REAL_ENGINES_ENV = "PYTEST_AUTOTUNE_REAL_ENGINES"
#: set to 1 to run the items marked ``quiet_timing`` (CI's quiet-timing step does; so does ``-m quiet_timing``)
QUIET_TIMING_ENV = "PYTEST_AUTOTUNE_QUIET_TIMING"


def quiet_timing_wanted(config: pytest.Config) -> bool:
    """Whether this run asked for the ``quiet_timing`` tests: by the environment, or by naming the marker in ``-m``."""
    return os.environ.get(QUIET_TIMING_ENV) == "1" or "quiet_timing" in (config.getoption("markexpr", "") or "")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not quiet_timing_wanted(config):
        quiet = [item for item in items if item.get_closest_marker("quiet_timing") is not None]
        if quiet:
            config.hook.pytest_deselected(items=quiet)
            items[:] = [item for item in items if item.get_closest_marker("quiet_timing") is None]
    if os.environ.get(REAL_ENGINES_ENV) != "1":
        skip_engine = pytest.mark.skip(reason=f"launches a real serving engine: run it with {REAL_ENGINES_ENV}=1 "
                                              "(CI's engine step, .ci/run) and the engine installed "
                                              "(autotune engine install vllm)")
        for item in items:
            if item.get_closest_marker("real_engine") is not None:
                item.add_marker(skip_engine)
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not gpu_items:
        return
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason=f"needs a CUDA GPU: torch {torch.__version__} sees none here "
                                   "(run it on a GPU host: benchmarks/harness/gpu/run_h200.sh)")
    for item in gpu_items:
        item.add_marker(skip)
