"""CUDA device: CUDA events around each sample, an L2 flush before it, and a host-clock cross-check with a
device-wide synchronisation (work left on side streams shows up as a gap between the two clocks)."""

from __future__ import annotations

import time
from typing import Any, Callable, Optional, Sequence

import torch

from .base import Device, Sample, _tensors


class CudaDevice(Device):
    name = "cuda"

    def __init__(self, index: int = 0, options: Optional[dict] = None) -> None:
        super().__init__(index, options)
        self._flush: Optional[torch.Tensor] = None

    @classmethod
    def unavailable_reason(cls) -> Optional[str]:
        if not torch.cuda.is_available():
            return (
                f"--device=cuda: torch {torch.__version__} sees no CUDA GPU on this machine "
                "(torch.cuda.is_available() is False); run on a GPU host with a CUDA build of torch, or use --device=cpu"
            )
        return None

    @property
    def torch_device(self) -> torch.device:
        return torch.device("cuda", self.index)

    def setup(self, threads: int) -> None:
        super().setup(threads)
        torch.cuda.set_device(self.index)
        # fp32 means fp32: TF32 would be a precision downgrade the correctness gate must see
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False

    def fingerprint(self) -> dict[str, Any]:
        fp = super().fingerprint()
        p = torch.cuda.get_device_properties(self.index)
        fp.update(
            name=p.name,
            capability=f"{p.major}.{p.minor}",
            sms=p.multi_processor_count,
            total_memory=p.total_memory,
            l2_bytes=getattr(p, "L2_cache_size", None),
            torch_cuda=torch.version.cuda,
            driver=_driver_version(),
        )
        return fp

    def to_device(self, value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return value.to(self.torch_device)
        return value

    def prepare_model(self, model: Any) -> Any:
        return model.to(self.torch_device) if hasattr(model, "to") else model

    def synchronize(self) -> None:
        torch.cuda.synchronize(self.index)

    def to_host(self, out: Any) -> Any:
        self.synchronize()
        if isinstance(out, torch.Tensor):
            return out.detach().to("cpu", copy=True)
        if isinstance(out, (list, tuple)):
            return tuple(self.to_host(o) for o in out)
        return out

    def output_location(self, out: Any) -> str:
        ts = _tensors(out)
        return ts[0].device.type if ts else "none"

    def _flush_l2(self) -> None:
        if self._flush is None:
            p = torch.cuda.get_device_properties(self.index)
            l2 = int(getattr(p, "L2_cache_size", 0) or 64 << 20)
            factor = int(self.options.get("l2_flush_factor", 2))
            self._flush = torch.empty(max(l2 * factor, 1 << 20) // 4, dtype=torch.int32, device=self.torch_device)
        self._flush.zero_()

    def timed(self, fn: Callable[..., Any], batches: Sequence[Sequence[Any]]) -> Sample:
        self._flush_l2()
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        outs: list = [None] * len(batches)
        torch.cuda.synchronize(self.index)
        h0 = time.perf_counter_ns()
        start.record()
        for i, b in enumerate(batches):
            outs[i] = fn(*b)
        end.record()
        torch.cuda.synchronize(self.index)  # device-wide: side streams included
        h1 = time.perf_counter_ns()
        return Sample(seconds=start.elapsed_time(end) * 1e-3, host_seconds=(h1 - h0) * 1e-9, outputs=outs)

    def timer_functions(self) -> dict[str, Any]:
        return {
            "torch.cuda.Event": torch.cuda.Event,
            "torch.cuda.Event.elapsed_time": torch.cuda.Event.elapsed_time,
            "torch.cuda.Event.record": torch.cuda.Event.record,
            "torch.cuda.synchronize": torch.cuda.synchronize,
            "time.perf_counter_ns": time.perf_counter_ns,
        }


def _driver_version() -> Optional[str]:
    try:
        import subprocess

        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=10,
        )
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None
    except (OSError, subprocess.SubprocessError):
        return None
