"""pytest-autotune's extension points, as pluggy hook specifications.

Implement them in a conftest.py or a plugin, exactly as the built-in parts do (see ``builtin.py``)::

    # conftest.py
    from pytest_autotune.gates import Gate, GateOutcome

    class NoSlowCandidates(Gate):
        name = "no-slow"
        stages = ("integrity",)
        def check(self, ctx, stage):
            if ctx.measurement and ctx.measurement.speedup < 0.5:
                return GateOutcome.refuse(self.name, "more than 2x slower than the baseline")

    def pytest_autotune_gates(config):
        return [NoSlowCandidates()]
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:  # pragma: no cover
    from .engines.adapters.base import EngineAdapter
    from .gates.base import Gate
    from .measure.devices.base import DeviceSpec
    from .provenance import ProvenanceKey


@pytest.hookspec
def pytest_autotune_provenance_keys(config: Any) -> "list[ProvenanceKey]":
    """Provenance keys to collect for every run (``scope="run"``) or item (``scope="item"``).

    Each key has a name, a type, a description and a collector. Built-in keys: protocol digest, git sha and
    dirty flag, harness digest, python/torch/numpy/mlx versions, host, device fingerprint, nonce commitment,
    and per item the problem/candidate/baseline digests and the paired seeds. A run or result whose required
    keys cannot be collected is not recorded.
    """


@pytest.hookspec
def pytest_autotune_gates(config: Any) -> "list[Gate]":
    """Gates to run on every kernel item. A gate has a ``name`` and a ``stage`` (``correctness``, ``probe``,
    ``integrity`` or ``breaker``) and a ``check(ctx)`` returning ``None`` (pass) or a refusing
    :class:`~pytest_autotune.gates.base.GateOutcome`. Stages run in the order of DESIGN §1; within a stage,
    in registration order; the first refusal ends the item."""


@pytest.hookspec
def pytest_autotune_devices(config: Any) -> "list[DeviceSpec]":
    """Devices that ``--device`` can name. A :class:`~pytest_autotune.measure.devices.base.DeviceSpec` points
    (``"module:Class"``) at a :class:`~pytest_autotune.measure.devices.base.Device` subclass that the sandbox
    imports by name, so the module must be importable in a fresh interpreter."""


@pytest.hookspec
def pytest_autotune_engines(config: Any) -> "list[EngineAdapter]":
    """Serving-engine adapters (:class:`~pytest_autotune.engines.adapters.base.EngineAdapter`): how to install,
    start, read back and judge one engine. A declaration file (``benchmarks/engines/<engine>.toml``) names the
    engine by the adapter's ``name``; the first adapter registered under a name wins. Built-in: ``vllm``,
    ``llamacpp``, ``sglang`` (docs/engines.md)."""


@pytest.hookspec
def pytest_autotune_frozen_protocols(config: Any) -> "dict[str, str]":
    """Extra frozen protocol pins ``{version: sha256}`` for projects that keep their own protocol.toml."""


@pytest.hookspec
def pytest_autotune_result_written(row: dict, table: str, row_id: int, config: Any) -> None:
    """Called in the controller after a row was committed to ``table`` (results, quarantine or rejections)."""
