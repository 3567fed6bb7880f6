"""The CUDA device (``--device=cuda``): setup, the L2 flush and persisting-L2 reset before every sample, the
fingerprint, data movement and outputs by handle. Timing (CUDA events, graphs, what one sample is) is
:mod:`.timing`.
"""

from __future__ import annotations

import math
import os
import sys
from types import ModuleType
from typing import Any, Optional

import torch

from ..base import Device
from ..memfd import HostExport, export_host_tensor
from . import fingerprint as fingerprint_module
from . import head_start as head_start_module
from . import hold as hold_module
from . import timing as timing_module
from .driver import (
    CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE,
    CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE,
    Driver,
    DriverError,
)
from .fingerprint import nvidia_smi, pci_bus_id
from .graphs import Graph
from .ipc import CudaIpcExport, export_cuda_tensor
from .timing import CudaTiming


class CudaDevice(CudaTiming, Device):
    name = "cuda"
    #: outputs are read through IPC mappings of the candidate's live memory (a later read shows later writes)
    live_exports = True

    def __init__(self, index: int = 0, options: Optional[dict] = None) -> None:
        super().__init__(index, options)
        self._flush: Optional[torch.Tensor] = None
        self._driver: Optional[Driver] = None
        self._side: Any = None  # the stream graphs are captured on
        self._graphs: list[Graph] = []
        self._fp: Optional[dict] = None
        #: None until the first sample of more than one call; then True (graphs) or False (eager)
        self._use_graphs: Optional[bool] = None
        self._calibration_captures = 0
        self._fastest_graph_call_s = math.inf
        self._fastest_eager_call_s = math.inf
        self._capture_failures: list[str] = []
        self._capture_probes = True
        self._mode_reason = "undecided"
        self._counts: dict[str, Any] = {
            "eager_samples": 0, "graph_samples": 0, "captures": 0, "inner_event_samples": 0,
            "persisting_limit_resets": 0, "persisting_l2_errors": 0, "access_window_errors": 0, "host_exports": 0}
        self._head_start_init()  # the hold itself is made in warm_runtime

    # ------------------------------------------------------------------------------------------ setup
    @classmethod
    def unavailable_reason(cls) -> Optional[str]:
        if not torch.cuda.is_available():
            return (
                f"--device=cuda: torch {torch.__version__} sees no CUDA GPU on this machine "
                "(torch.cuda.is_available() is False); run on a GPU host with a CUDA build of torch, or use --device=cpu"
            )
        return None

    @classmethod
    def count(cls) -> int:
        return torch.cuda.device_count()

    @property
    def torch_device(self) -> torch.device:
        return torch.device("cuda", self.index)

    @property
    def graph_below_s(self) -> float:
        return float(self.options.get("graph_below_s", 10e-6) or 0.0)

    def setup(self, threads: int) -> None:
        super().setup(threads)
        torch.cuda.set_device(self.index)
        # fp32 means fp32: TF32 would be a precision downgrade the correctness gate must see
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False

    def warm_runtime(self) -> None:
        """Create the context, the flush buffer, the capture stream, the driver handle and the head start's hold
        before the sandbox counts threads and takes its tamper snapshot (all of them are part of the measuring
        machinery)."""
        torch.cuda.set_device(self.index)
        torch.ones(8, device=self.torch_device).add_(1)
        self._flush_buffer()
        self._capture_stream()
        drv = self._drv()
        # the persisting-L2 carve-out starts at 0 before anything is snapshotted: a candidate that raises it
        # changes a watched setting (and every sample puts it back to 0 anyway)
        if drv.ok and drv.persisting_limit():
            drv.set_persisting_limit(0)
        if drv.ok:
            drv.reset_persisting_lines()
        # the head start's hold (its kernel compiled, its page of pinned host memory): per sandbox, never handed to
        # the candidate, in the tamper snapshot (timer_functions)
        self._head_start_setup()
        torch.cuda.synchronize(self.index)

    def _drv(self) -> Driver:
        if self._driver is None:
            self._driver = Driver()
        return self._driver

    def _capture_stream(self) -> Any:
        if self._side is None:
            self._side = torch.cuda.Stream(device=self.torch_device)
        return self._side

    def l2_bytes(self) -> int:
        p = torch.cuda.get_device_properties(self.index)
        l2 = int(getattr(p, "L2_cache_size", 0) or 0)
        if l2 <= 0:
            l2 = int(self._drv().device_attribute(self.index, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE) or 0)
        return l2 if l2 > 0 else 64 << 20

    def flush_bytes(self) -> int:
        """Bytes written before every sample: ``l2_flush_factor`` (at least 1) times the L2 size."""
        factor = max(float(self.options.get("l2_flush_factor", 2) or 2), 1.0)
        return int(math.ceil(self.l2_bytes() * factor / 4096.0)) * 4096

    def _flush_buffer(self) -> torch.Tensor:
        if self._flush is None:
            self._flush = torch.empty(self.flush_bytes() // 4, dtype=torch.int32, device=self.torch_device)
        return self._flush

    def tamper_modules(self) -> list[ModuleType]:
        """This module, and the modules the timing code moved to: their functions and classes are in the
        sandbox's tamper snapshot, as they were when all of it was one module."""
        return [sys.modules[__name__], timing_module, fingerprint_module, head_start_module, hold_module]

    # ------------------------------------------------------------------------------------------ fingerprint
    def fingerprint(self) -> dict[str, Any]:
        if self._fp is not None:
            return dict(self._fp)
        fp = super().fingerprint()
        p = torch.cuda.get_device_properties(self.index)
        drv = self._drv()
        uuid = getattr(p, "uuid", None)
        fp.update(
            name=p.name,
            index=self.index,
            capability=f"{p.major}.{p.minor}",
            sms=p.multi_processor_count,
            total_memory=p.total_memory,
            l2_bytes=self.l2_bytes(),
            persisting_l2_max_bytes=drv.device_attribute(self.index, CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE),
            uuid=f"GPU-{uuid}" if uuid is not None and not str(uuid).startswith("GPU-") else (str(uuid) if uuid else None),
            pci_bus_id=pci_bus_id(p),
            torch=torch.__version__,
            torch_cuda=torch.version.cuda,
            cudnn=torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
            cuda_driver_api=drv.driver_version(),
            cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"),
            cuda_device_order=os.environ.get("CUDA_DEVICE_ORDER"),
            l2_flush_bytes=self.flush_bytes(),
            graph_below_s=self.graph_below_s,
            head_start=self._hs_setting,
            head_start_max_s=self._hs_limit_s if self._hs_setting != "off" else None,
        )
        smi = nvidia_smi(fp.get("uuid") or fp.get("pci_bus_id") or str(self.index))
        fp["driver"] = smi.pop("driver_version", None)
        fp["nvidia_smi"] = smi
        self._fp = fp
        return dict(fp)

    # ------------------------------------------------------------------------------------------ data
    def generation_device(self) -> Optional[torch.device]:
        return self.torch_device

    def to_device(self, value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return value.to(self.torch_device)
        return value

    def prepare_model(self, model: Any) -> Any:
        return model.to(self.torch_device) if hasattr(model, "to") else model

    def synchronize(self) -> None:
        torch.cuda.synchronize(self.index)

    def free_memory_bytes(self) -> Optional[int]:
        return int(torch.cuda.mem_get_info(self.index)[0])

    def memory_info(self) -> Optional[tuple[int, int]]:
        free, total = (int(v) for v in torch.cuda.mem_get_info(self.index))
        cap = self.options.get("memory_bytes")
        if cap:  # the harness may plan with at most this much, whatever else is free
            free = min(free, int(cap))
        return free, total

    def release_cached_memory(self) -> None:
        torch.cuda.synchronize(self.index)
        torch.cuda.empty_cache()

    def reset_peak_memory(self) -> None:
        torch.cuda.reset_peak_memory_stats(self.index)

    def peak_memory(self) -> Optional[tuple[int, int]]:
        return int(torch.cuda.memory_allocated(self.index)), int(torch.cuda.max_memory_allocated(self.index))

    def to_host(self, out: Any) -> Any:
        self.synchronize()
        if isinstance(out, torch.Tensor):
            return out.detach().to("cpu", copy=True)
        if isinstance(out, (list, tuple)):
            return tuple(self.to_host(o) for o in out)
        return out

    # ------------------------------------------------------------------------------------------ outputs by handle
    def export_tensor(self, t: torch.Tensor) -> dict[str, Any]:
        if t.device.type == "cuda":
            try:
                return export_cuda_tensor(self._drv(), t)
            except DriverError as e:
                self._counts["host_exports"] += 1
                self._counts.setdefault("ipc_errors", []).append(str(e)[:200])  # type: ignore[attr-defined]
            return export_host_tensor(t.detach().to("cpu", copy=True))
        return export_host_tensor(t)

    def open_export(self, meta: dict[str, Any]) -> Any:
        if meta.get("via") in ("cuda-ipc", "empty"):
            return CudaIpcExport(self._drv(), meta, self.torch_device)
        return HostExport(meta)

    # ------------------------------------------------------------------------------------------ L2
    def reset_persisting_l2(self) -> None:
        """No persisting-L2 carve-out survives into a sample: persisting lines are demoted to normal (so the
        flush evicts them), the carve-out limit goes back to 0 if anyone raised it, and the current stream's
        access-policy window is cleared."""
        drv = self._drv()
        if not drv.ok:
            return
        errors = 0
        limit = drv.persisting_limit()
        if limit:
            self._counts["persisting_limit_resets"] += 1
            errors += drv.set_persisting_limit(0) != 0
        errors += drv.reset_persisting_lines() != 0
        if errors:
            self._counts["persisting_l2_errors"] += int(errors)
        if drv.clear_access_policy_window(torch.cuda.current_stream(self.index).cuda_stream) != 0:
            self._counts["access_window_errors"] += 1

    def flush_l2(self) -> None:
        self.reset_persisting_l2()
        self._flush_buffer().zero_()
