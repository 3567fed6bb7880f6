"""Which processes hold a context on a GPU, and which used its SMs, as the driver says (NVML), read by the controller.

A candidate's helper process can reach the GPU in ways torch never sees (the driver API through ctypes, a second
program): it shows here, by its pid in the host's pid namespace, whatever it reports (docs/design/threat-model.md#the-catalog). :class:`Nvml` is the driver's view through NVIDIA's own
bindings (``pynvml``, the ``nvidia-ml-py`` wheel: the GPU host's image lists it, and
benchmarks/harness/gpu/fetch_wheels.sh carries it to a host that lacks it); without them, or without a driver,
:func:`open_nvml` says why and the controller counts processes from ``/proc`` alone.

Only pids the controller can attribute matter: NVML names processes by their pid in the *initial* pid namespace,
which is the controller's own when it runs on the host; :meth:`Nvml.pids_match` checks that with the controller's
own pid (it holds a context once it has computed a golden output) before any pid is trusted.
"""

from __future__ import annotations

import os
import time
from typing import Any, Optional, Protocol


class GpuProcessSource(Protocol):
    """What the helper watch needs of the driver (:class:`Nvml`, or a test's fake)."""

    def running(self) -> dict[int, tuple[int, Optional[int]]]:
        """pid -> (device index, bytes it holds or None) for every process with a compute context."""
        ...

    def busy_since_last(self) -> dict[int, int]:
        """pid -> the largest SM utilisation (%) the driver sampled for it since the last call."""
        ...


class Nvml:
    """NVML through ``pynvml``: every device's compute processes and per-process utilisation samples."""

    def __init__(self, nvml: Any) -> None:
        self.nv = nvml
        self.handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
        self._last_ts = [0] * len(self.handles)
        self.version = str(getattr(nvml, "__version__", "") or "pynvml")
        try:
            self.driver = _text(nvml.nvmlSystemGetDriverVersion())
        except Exception:  # noqa: BLE001
            self.driver = "?"

    def running(self) -> dict[int, tuple[int, Optional[int]]]:
        out: dict[int, tuple[int, Optional[int]]] = {}
        for i, h in enumerate(self.handles):
            try:
                procs = self.nv.nvmlDeviceGetComputeRunningProcesses(h)
            except self.nv.NVMLError:
                continue
            for p in procs:
                mem = getattr(p, "usedGpuMemory", None)
                out[int(p.pid)] = (i, int(mem) if isinstance(mem, int) else None)
        return out

    def busy_since_last(self) -> dict[int, int]:
        out: dict[int, int] = {}
        for i, h in enumerate(self.handles):
            try:
                samples = self.nv.nvmlDeviceGetProcessUtilization(h, self._last_ts[i])
            except self.nv.NVMLError:  # NVML_ERROR_NOT_FOUND: no sample since then
                continue
            for s in samples:
                self._last_ts[i] = max(self._last_ts[i], int(s.timeStamp))
                out[int(s.pid)] = max(out.get(int(s.pid), 0), int(s.smUtil))
        return out

    def pids_match(self, timeout_s: float = 0.0) -> Optional[bool]:
        """Does NVML list this process (which holds a CUDA context) under its own pid? None: this process holds
        no context that NVML shows (nothing to compare with)."""
        deadline = time.monotonic() + timeout_s
        while True:
            pids = self.running()
            if os.getpid() in pids:
                return True
            if time.monotonic() >= deadline:
                return None if not pids else False
            time.sleep(0.05)


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


_OPENED: dict[str, Any] = {}


def open_nvml() -> tuple[Optional[Nvml], str]:
    """(the driver's view, "") or (None, why not and how to get it). Initialised once per process."""
    if "nvml" in _OPENED:
        return _OPENED["nvml"], _OPENED["why"]
    nv: Optional[Nvml] = None
    why = ""
    try:
        import importlib

        pynvml = importlib.import_module("pynvml")  # nvidia-ml-py (by name: optional, no type stubs)
        pynvml.nvmlInit()
        nv = Nvml(pynvml)
    except ImportError:
        why = "NVIDIA's NVML bindings are not importable: pip install nvidia-ml-py (benchmarks/harness/gpu/fetch_wheels.sh)"
    except Exception as e:  # noqa: BLE001 - NVMLError (no driver, no library)
        why = f"NVML could not be initialised ({type(e).__name__}: {e})"
    _OPENED.update({"nvml": nv, "why": why})
    return nv, why


__all__ = ["GpuProcessSource", "Nvml", "open_nvml"]
