"""The device interface: where calls run and how one timing sample is taken.

A device object lives in two places: the controller (golden outputs, fingerprint) and the sandbox (candidate
calls, timing). Devices are plugins: ``pytest_autotune_devices`` returns :class:`DeviceSpec` s whose ``target``
("module:Class") the sandbox imports by name.
"""

from __future__ import annotations

import abc
import platform
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Optional, Sequence

import torch

from .spec import DeviceSpec  # noqa: F401  (re-exported)


@dataclass
class Sample:
    """One timing sample: ``calls`` calls, each on its own inputs. ``seconds`` is the device's own measure;
    ``host_seconds`` the host clock around the same region including a full device synchronisation."""

    seconds: float
    host_seconds: float
    outputs: list = field(default_factory=list)


class Device(abc.ABC):
    name: ClassVar[str]
    framework: ClassVar[str] = "torch"  # "torch" | "mlx": which model class family runs here

    def __init__(self, index: int = 0, options: Optional[dict] = None) -> None:
        self.index = index
        self.options = dict(options or {})

    # -- controller side -------------------------------------------------------------------------------
    @classmethod
    def unavailable_reason(cls) -> Optional[str]:
        """``None`` if usable here, else why not and what to do (checked before collection)."""
        return None

    def fingerprint(self) -> dict[str, Any]:
        return {"device": self.name, "machine": platform.machine(), "processor": platform.processor()}

    @property
    def lock_key(self) -> str:
        """Name of the exclusive-timing lock: two processes never time on the same key at once."""
        return f"{self.name}{self.index}"

    # -- both sides --------------------------------------------------------------------------------------
    def setup(self, threads: int) -> None:
        """Called once in every process that runs models on this device."""
        torch.set_num_threads(threads)

    def generation_device(self) -> Optional["torch.device"]:
        """Where inputs are drawn (``None``: on the CPU, the KernelBench default). Both sides use it."""
        return None

    def warm_runtime(self) -> None:
        """Start the runtime's own threads/streams (one tiny op) before threads are counted."""
        return None

    @abc.abstractmethod
    def to_device(self, value: Any) -> Any:
        """An input (torch tensor built on CPU) as this device's input."""

    def prepare_model(self, model: Any) -> Any:
        return model

    @abc.abstractmethod
    def synchronize(self) -> None: ...

    @abc.abstractmethod
    def to_host(self, out: Any) -> Any:
        """A CPU torch tensor (or tuple of them) holding a copy of ``out``; synchronises first."""

    def output_location(self, out: Any) -> str:
        return "cpu"

    @abc.abstractmethod
    def timed(self, fn: Callable[..., Any], batches: Sequence[Sequence[Any]]) -> Sample:
        """Run ``fn(*batch)`` for each batch as ONE timed sample; keep the outputs in the sample."""

    def timer_functions(self) -> dict[str, Any]:
        """Objects whose identity must not change while a candidate is loaded (tamper snapshots)."""
        return {}

    def scrub(self, out: Any) -> None:
        """Overwrite a baseline output before it is freed, so a candidate cannot read it from freed memory."""
        for t in _tensors(out):
            if t.is_floating_point():
                t.detach().fill_(float("nan"))
            else:
                t.detach().zero_()


def _tensors(out: Any) -> list:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in _tensors(o)]
    return []
