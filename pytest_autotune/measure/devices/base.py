"""The device interface: where calls run, how one timing sample is taken, how outputs cross the boundary.

A device object lives in two places: the controller (golden outputs, comparisons, fingerprints of device info) and
the sandbox (candidate calls, timing). Devices are plugins: ``pytest_autotune_devices`` returns :class:`DeviceSpec`
s whose ``target`` ("module:Class") the sandbox imports by name.

Outputs never travel as bytes on the sandbox socket (docs/architecture.md#outputs-cross-by-handle): the
sandbox calls :meth:`Device.export_tensor` on each plain output tensor and sends the small metadata it returns;
the controller calls :meth:`Device.open_export` and judges the tensor it gets, on the device. The default (any
torch device whose tensors can be copied to the host) is a sealed memfd (:mod:`.memfd`); CUDA uses IPC handles.
"""

from __future__ import annotations

import abc
import platform
import sys
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Callable, ClassVar, Optional, Sequence

import torch

from ...tree import tensors
from .spec import DeviceSpec  # noqa: F401  (re-exported)


@dataclass
class Sample:
    """One timing sample: ``calls`` calls, each on its own inputs. ``seconds`` is the device's own measure;
    ``host_seconds`` the host clock around the same region including a full device synchronisation.

    Devices with a head start (CUDA, ``[devices.cuda].head_start``: measure/devices/cuda/head_start.py) also say
    how ``seconds`` was made: ``event_seconds`` (the device's clock over the calls, after the hold),
    ``enqueue_seconds`` (the host's clock from the first launch to the last), ``first_call_seconds`` (the host's
    clock from the first launch to the hold's release: the first call, or the graph's replay), ``bound``
    (``"device"``: seconds is the event time; ``"host"``: the enqueue time, which was longer), ``head_start`` (the
    hold that ran: ``"spin"`` or ``"off"``), ``hold_seconds`` (how long the GPU was held, by its own clock) and
    ``hold_expired`` (the hold ran out before the host released it). ``None`` where a device does not measure it."""

    seconds: float
    host_seconds: float
    outputs: list = field(default_factory=list)
    event_seconds: Optional[float] = None
    enqueue_seconds: Optional[float] = None
    first_call_seconds: Optional[float] = None
    hold_seconds: Optional[float] = None
    hold_expired: Optional[bool] = None
    head_start: Optional[str] = None
    bound: Optional[str] = None


class Device(abc.ABC):
    name: ClassVar[str]
    framework: ClassVar[str] = "torch"  # "torch" | "mlx": which model class family runs here
    #: whether :meth:`open_export` maps the candidate's live memory (then the controller re-reads it after a delay
    #: to find late writers) or receives a sealed snapshot (then the sandbox exports a second one after the delay)
    live_exports: ClassVar[bool] = False

    def __init__(self, index: int = 0, options: Optional[dict] = None) -> None:
        self.index = index
        self.options = dict(options or {})

    # -- controller side -------------------------------------------------------------------------------
    @classmethod
    def unavailable_reason(cls) -> Optional[str]:
        """``None`` if usable here, else why not and what to do (checked before collection)."""
        return None

    @classmethod
    def count(cls) -> int:
        """Devices of this kind on this host: xdist worker gwN measures on index N mod count (docs/guide/parallel.md)."""
        return 1

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

    def free_memory_bytes(self) -> Optional[int]:
        """Free memory of the device the timed calls' inputs and outputs live on, or ``None`` where the schedule
        need not budget it (host memory: the sandbox's own limit stops a runaway)."""
        return None

    # -- device memory, planned across an item's processes (measure/memory.py) -------------------------------
    def memory_info(self) -> Optional[tuple[int, int]]:
        """``(free, total)`` bytes of this device, every process's use subtracted, or ``None`` where nothing need
        be planned. ``options["memory_bytes"]`` (``--autotune-device-memory``) caps what the harness may plan
        with; on a device without memory of its own (the CPU) it declares one, so memory planning can be exercised
        there."""
        cap = self.options.get("memory_bytes")
        return (int(cap), int(cap)) if cap else None

    def process_overhead_bytes(self) -> int:
        """Device memory one process holds beyond its tensors (a CUDA context, its libraries, the flush buffer)."""
        return int(self.options.get("process_overhead_bytes", 0) or 0)

    def release_cached_memory(self) -> None:
        """Give blocks this process's allocator keeps cached back to the device (between an item's stages)."""
        return None

    def reset_peak_memory(self) -> None:
        """Start measuring this process's peak of allocated device memory (see :meth:`peak_memory`)."""
        return None

    def peak_memory(self) -> Optional[tuple[int, int]]:
        """``(allocated now, peak allocated since reset_peak_memory)`` in bytes, or ``None`` where not known."""
        return None

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
        ts = tensors(out)
        return ts[0].device.type if ts else "none"

    # -- outputs across the sandbox boundary ----------------------------------------------------------------
    def export_tensor(self, t: "torch.Tensor") -> dict[str, Any]:
        """Sandbox side: metadata (and a handle) through which the controller can read plain tensor ``t``."""
        from .memfd import export_host_tensor

        return export_host_tensor(t if t.device.type == "cpu" else t.detach().to("cpu", copy=True))

    def open_export(self, meta: dict[str, Any]) -> Any:
        """Controller side: an object with ``snapshot() -> torch.Tensor``, ``close()`` and ``live`` (whether a
        later snapshot can show later writes) for metadata made by :meth:`export_tensor`."""
        from .memfd import HostExport

        return HostExport(meta)

    # -- a timing round's data placement (sandbox side; measure/devices/placement.py) ------------------------
    def round_begins(self, seed: int) -> None:
        """A timing round's inputs are about to be built (``seed``: drawn by the controller for this round)."""
        return None

    def round_inputs_built(self) -> None:
        """The round's inputs exist; its samples come next."""
        return None

    def round_ends(self) -> None:
        """The round's inputs and outputs have been freed."""
        return None

    # -- timing configuration agreed by the controller for both arms ---------------------------------------
    def configure_timing(self, options: dict[str, Any]) -> None:
        """The controller's timing decisions for this sandbox (same for both arms)."""
        return None

    def timing_info(self) -> dict[str, Any]:
        """What this sandbox's timing looked like (mode, calibration facts, counters)."""
        return {}

    @abc.abstractmethod
    def timed(self, fn: Callable[..., Any], batches: Sequence[Sequence[Any]]) -> Sample:
        """Run ``fn(*batch)`` for each batch as ONE timed sample; keep the outputs in the sample."""

    def timer_functions(self) -> dict[str, Any]:
        """Objects whose identity must not change while a candidate is loaded (tamper snapshots)."""
        return {}

    def tamper_modules(self) -> list[ModuleType]:
        """Modules whose functions and classes the sandbox's tamper snapshot watches (sandbox/child.py): the
        module of the device's class; a device whose timing code lives in more modules lists them all."""
        return [sys.modules[type(self).__module__]]
