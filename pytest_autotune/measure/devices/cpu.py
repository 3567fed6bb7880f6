"""CPU device: host clock around the calls; thread count fixed by the protocol."""

from __future__ import annotations

import os
import platform
import time
from typing import Any, Callable, Sequence

import torch

from .base import Device, Sample, _tensors


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


class CpuDevice(Device):
    name = "cpu"

    def fingerprint(self) -> dict[str, Any]:
        fp = super().fingerprint()
        fp.update(
            cpu_model=_cpu_model(),
            logical_cpus=os.cpu_count(),
            torch_threads=torch.get_num_threads(),
            torch_parallel=torch.__config__.parallel_info().splitlines()[0] if hasattr(torch, "__config__") else "",
        )
        return fp

    def to_device(self, value: Any) -> Any:
        return value

    def synchronize(self) -> None:
        return None

    def to_host(self, out: Any) -> Any:
        if isinstance(out, torch.Tensor):
            return out.detach().clone()
        if isinstance(out, (list, tuple)):
            return tuple(self.to_host(o) for o in out)
        return out

    def output_location(self, out: Any) -> str:
        ts = _tensors(out)
        return ts[0].device.type if ts else "none"

    def timed(self, fn: Callable[..., Any], batches: Sequence[Sequence[Any]]) -> Sample:
        outs: list = [None] * len(batches)
        clock = time.perf_counter_ns
        t0 = clock()
        for i, b in enumerate(batches):
            outs[i] = fn(*b)
        t1 = clock()
        s = (t1 - t0) * 1e-9
        return Sample(seconds=s, host_seconds=s, outputs=outs)

    def timer_functions(self) -> dict[str, Any]:
        return {"time.perf_counter_ns": time.perf_counter_ns}
