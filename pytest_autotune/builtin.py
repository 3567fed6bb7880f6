"""The built-in parts, registered as ordinary implementations of pytest-autotune's own hooks (hookspec.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from .measure.devices.spec import DeviceSpec
from .provenance import ProvenanceKey, builtin_keys

if TYPE_CHECKING:  # pragma: no cover
    from .gates.base import Gate


class BuiltinParts:
    @pytest.hookimpl(trylast=True)
    def pytest_autotune_provenance_keys(self, config: pytest.Config) -> list[ProvenanceKey]:
        from .sandbox.jail_session import isolation_keys

        return builtin_keys() + isolation_keys(config)

    @pytest.hookimpl(tryfirst=True)
    def pytest_autotune_gates(self, config: pytest.Config) -> list["Gate"]:
        # imported here: gates pull in torch and hypothesis, which a plain `pytest --help` should not pay for
        from .gates.breaker import BreakerGate
        from .gates.clocks import DeviceClockGate, WallClockGate
        from .gates.correctness import CorrectnessGate
        from .gates.integrity import IdleGate, TamperGate, ThreadGate
        from .gates.kernelbench import KernelBenchVerdictGate
        from .gates.probes import ProbeGate
        from .gates.timed_outputs import TimedOutputsGate
        from .keys import SESSION_KEY

        session = config.stash.get(SESSION_KEY, None)
        release_lookup = session.release_for if session is not None else None
        probe_seed = config.getoption("autotune_probe_seed", None)
        return [
            TamperGate(),
            KernelBenchVerdictGate(),
            CorrectnessGate(),
            ProbeGate(probe_seed_override=probe_seed),
            WallClockGate(),
            ThreadGate(),
            IdleGate(),
            TimedOutputsGate(),
            DeviceClockGate(),
            BreakerGate(release_lookup),
        ]

    @pytest.hookimpl(trylast=True)
    def pytest_autotune_devices(self, config: pytest.Config) -> list[DeviceSpec]:
        return [
            DeviceSpec("cpu", "pytest_autotune.measure.devices.cpu:CpuDevice", "host CPU, protocol thread count"),
            DeviceSpec("cuda", "pytest_autotune.measure.devices.cuda:CudaDevice", "NVIDIA GPU, CUDA events"),
            DeviceSpec("mlx", "pytest_autotune.measure.devices.mlx:MlxDevice", "MLX (held-out retest leg)",
                       framework="mlx"),
        ]

    @pytest.hookimpl(trylast=True)
    def pytest_autotune_engines(self, config: pytest.Config) -> list:
        from .engines.adapters import builtin_adapters

        return builtin_adapters()

    @pytest.hookimpl(trylast=True)
    def pytest_autotune_frozen_protocols(self, config: pytest.Config) -> dict[str, str]:
        return {}
