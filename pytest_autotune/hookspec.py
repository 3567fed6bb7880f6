"""pytest-autotune's extension points, as pluggy hook specifications.

Implement them in a conftest.py or a plugin, exactly as the built-in parts do (see ``builtin.py`` and
docs/architecture.md#extension-hooks)::

    # conftest.py
    from pytest_autotune.gates import Gate, GateOutcome

    class NoSlowCandidates(Gate):
        name = "no-slow"
        stages = ("breaker",)        # correctness | probe | integrity | breaker
        needs_timing = True          # only with --autotune (it reads the measurement)

        def check(self, ctx, stage):
            if ctx.measurement is not None and ctx.measurement.speedup < 0.5:
                return GateOutcome.refuse(self.name, "more than 2x slower than the baseline")
            return None

    def pytest_autotune_gates(config):
        return [NoSlowCandidates()]

(tests/test_units.py::test_hookspec_example_runs runs this example.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:  # pragma: no cover
    from .engines.adapters.base import EngineAdapter
    from .gates.base import Gate
    from .measure.devices.base import DeviceSpec
    from .provenance import ProvenanceKey
    from .result import ItemOutcome
    from .session import AutotuneSession


@pytest.hookspec
def pytest_autotune_provenance_keys(config: pytest.Config) -> "list[ProvenanceKey]":
    """Provenance keys to collect for every run (``scope="run"``) or item (``scope="item"``).

    Each key has a name, a type, a description and a collector. Built-in keys: protocol digest, git sha and
    dirty flag, harness digest, python/torch/numpy/mlx versions, host, device fingerprint, nonce commitment,
    and per item the problem/candidate/baseline digests and the paired seeds. A run or result whose required
    keys cannot be collected is not recorded.
    """
    raise NotImplementedError  # a specification: pluggy calls the implementations


@pytest.hookspec
def pytest_autotune_gates(config: pytest.Config) -> "list[Gate]":
    """Gates to run on every kernel item. A gate (:class:`~pytest_autotune.gates.Gate`) has a ``name``, the
    ``stages`` it runs in (``correctness``, ``probe``, ``integrity``, ``breaker``), ``needs_timing`` when it only
    runs with ``--autotune``, and ``check(ctx, stage)`` returning ``None`` (pass) or a refusing
    :class:`~pytest_autotune.gates.GateOutcome`. ``ctx`` is the item's
    :class:`~pytest_autotune.gates.GateContext`. Stages run in the order of the flow (docs/architecture.md);
    within a stage, gates run in registration order; the first refusal ends the item."""
    raise NotImplementedError  # a specification: pluggy calls the implementations


@pytest.hookspec
def pytest_autotune_devices(config: pytest.Config) -> "list[DeviceSpec]":
    """Devices that ``--device`` can name. A :class:`~pytest_autotune.measure.devices.base.DeviceSpec` points
    (``"module:Class"``) at a :class:`~pytest_autotune.measure.devices.base.Device` subclass that the sandbox
    imports by name, so the module must be importable in a fresh interpreter."""
    raise NotImplementedError  # a specification: pluggy calls the implementations


@pytest.hookspec
def pytest_autotune_engines(config: pytest.Config) -> "list[EngineAdapter]":
    """Serving-engine adapters (:class:`~pytest_autotune.engines.adapters.base.EngineAdapter`): how to install,
    start, read back and judge one engine. A declaration file (``benchmarks/engines/<engine>.toml``) names the
    engine by the adapter's ``name``; the first adapter registered under a name wins. Built-in: ``vllm``,
    ``llamacpp``, ``sglang`` (docs/guide/engines.md)."""
    raise NotImplementedError  # a specification: pluggy calls the implementations


@pytest.hookspec
def pytest_autotune_frozen_protocols(config: pytest.Config) -> "dict[str, str]":
    """Extra frozen protocol pins ``{version: sha256}`` for projects that keep their own protocol.toml."""
    raise NotImplementedError  # a specification: pluggy calls the implementations


@pytest.hookspec
def pytest_autotune_result_written(row: dict, table: str, row_id: int, config: pytest.Config) -> None:
    """Called in the controller after a row was committed to ``table`` (results, quarantine or rejections)."""


@pytest.hookspec
def pytest_autotune_session_start(session: "AutotuneSession") -> None:
    """Called in every process (controller and xdist workers) once the session knows its options, protocol and
    device, before the controller begins its run in the store. Raise
    :class:`~pytest_autotune.errors.AutotuneUsageError` to refuse the session (a usage error naming the fix; no run
    is recorded). The CI comparison (docs/guide/ci.md) loads and checks its stored run here."""


@pytest.hookspec
def pytest_autotune_report_sections(config: pytest.Config, outcomes: "tuple[ItemOutcome, ...]") -> "dict":
    """Extra top-level sections ``{name: JSON value}`` of the JSON report (controller, end of the session; every
    outcome of the session, xdist workers' included). Built-in: ``compare`` (docs/guide/ci.md)."""
    raise NotImplementedError  # a specification: pluggy calls the implementations
