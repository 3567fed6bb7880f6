"""The root conftest: what both tests/ and benchmarks/ rely on, and nothing else.

- ``pytester``, which the project's plugin tests drive whole pytest sessions with, is loaded by ``-p pytester`` in
  pyproject.toml, not by ``pytest_plugins`` here: a test that collects the bundled benchmarks from a pytester
  directory loads this file as a non-root conftest, where pytest refuses ``pytest_plugins``.
- the ``gpu`` marker (declared in pyproject.toml): an item so marked is skipped, with the reason, where torch sees
  no CUDA device -- CI has none; the same items run on a GPU host (benchmarks/harness/gpu/run_h200.sh).
  torch is imported only when such an item was collected, so ``pytest --help`` stays light.
"""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
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
