"""CPU device: host clock around the calls; thread count fixed by the protocol; a cache flush before every sample.

The flush (``flush_bytes``, from ``[devices.cpu].cache_flush_factor`` x the per-core L2 size) writes a private
buffer before the sample's clock starts, so every sample of either arm begins with the same cache history: the
arms run in separate processes pinned to one CPU (docs/architecture.md), and without it the second sample of a
pair would find the first one's data, or its own previous sample's, in L1/L2.
"""

from __future__ import annotations

import os
import platform
import time
from typing import Any, Callable, Optional, Sequence

import torch

from ...hostinfo import cpuinfo
from .base import Device, Sample
from .placement import Placement


def _cpu_model() -> str:
    return cpuinfo().get("model name") or platform.processor() or platform.machine()


def _cache_sizes() -> dict[int, int]:
    """Level -> bytes of CPU 0's data and unified caches, as sysfs reports them."""
    sizes: dict[int, int] = {}
    for index in range(8):
        base = f"/sys/devices/system/cpu/cpu0/cache/index{index}"
        try:
            with open(f"{base}/level") as f:
                level = int(f.read().strip())
            with open(f"{base}/type") as f:
                if f.read().strip() == "Instruction":
                    continue
            with open(f"{base}/size") as f:
                text = f.read().strip().upper()
        except (OSError, ValueError):
            continue
        mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        try:
            sizes[level] = max(sizes.get(level, 0), int(text.rstrip("KMG")) * mult)
        except ValueError:
            continue
    return sizes


def per_core_l2_bytes() -> int:
    """The L2 size of CPU 0 as sysfs reports it (1 MiB where it cannot be read)."""
    return _cache_sizes().get(2, 1 << 20)


def last_level_cache_bytes() -> int:
    """The largest cache level of CPU 0 as sysfs reports it, usually the L3 that cores share (32 MiB where
    nothing can be read)."""
    sizes = _cache_sizes()
    return sizes[max(sizes)] if sizes else 32 << 20


class CpuDevice(Device):
    name = "cpu"

    def __init__(self, index: int = 0, options: Any = None) -> None:
        super().__init__(index, options)
        self._flush: Any = None
        self._flush_value = 0
        self._flush_bytes: Optional[int] = None
        self._llc: Any = None
        self._llc_value = 0
        self.placement = Placement(int(self.options.get("placement_span_kib", 0) or 0) << 10)

    def fingerprint(self) -> dict[str, Any]:
        fp = super().fingerprint()
        fp.update(
            cpu_model=_cpu_model(),
            logical_cpus=os.cpu_count(),
            torch_threads=torch.get_num_threads(),
            torch_parallel=torch.__config__.parallel_info().splitlines()[0] if hasattr(torch, "__config__") else "",
            l2_bytes=per_core_l2_bytes(),
            cache_flush_bytes=self.flush_bytes(),
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

    def flush_bytes(self) -> int:
        if self._flush_bytes is None:
            factor = float(self.options.get("cache_flush_factor", 0) or 0)
            self._flush_bytes = int(factor * per_core_l2_bytes()) // 4096 * 4096
        return self._flush_bytes

    def llc_flush_bytes(self) -> int:
        """Bytes written after a round's inputs are built (``[devices.cpu].llc_flush_factor`` x the last-level cache;
        0: none)."""
        factor = float(self.options.get("llc_flush_factor", 0) or 0)
        return int(factor * last_level_cache_bytes()) // 4096 * 4096

    def flush_last_level_cache(self) -> None:
        """Write a buffer of ``llc_flush_bytes``: what the round built leaves the caches, so every call of every
        sample reads its inputs from memory whatever ``k`` is (docs/architecture.md, "The sample's shape"). The
        buffer is one mapping of its own (above glibc's mmap threshold), allocated once: it moves nothing on the
        heap."""
        n = self.llc_flush_bytes()
        if n <= 0:
            return
        if self._llc is None:
            self._llc = torch.empty(n // 4, dtype=torch.int32)
        self._llc_value += 1
        self._llc.fill_(self._llc_value)

    def flush_cache(self) -> None:
        n = self.flush_bytes()
        if n <= 0:
            return
        if self._flush is None or self._flush.numel() * 4 != n:
            self._flush = torch.empty(n // 4, dtype=torch.int32)
        self._flush_value += 1
        self._flush.fill_(self._flush_value)

    def timed(self, fn: Callable[..., Any], batches: Sequence[Sequence[Any]]) -> Sample:
        outs: list = [None] * len(batches)
        clock = time.perf_counter_ns
        self.flush_cache()
        t0 = clock()
        for i, b in enumerate(batches):
            outs[i] = fn(*b)
        t1 = clock()
        s = (t1 - t0) * 1e-9
        return Sample(seconds=s, host_seconds=s, outputs=outs)

    def round_begins(self, seed: int) -> None:
        self.placement.before_inputs(seed)

    def round_inputs_built(self) -> None:
        self.placement.after_inputs()
        self.flush_last_level_cache()

    def round_ends(self) -> None:
        self.placement.end_round()

    def timing_info(self) -> dict[str, Any]:
        info: dict[str, Any] = {"mode": "host clock", "cache_flush_bytes": self.flush_bytes(),
                                "llc_flush_bytes": self.llc_flush_bytes()}
        if self.placement.enabled:
            info["placement"] = self.placement.info()
        return info

    def timer_functions(self) -> dict[str, Any]:
        fns: dict[str, Any] = {"time.perf_counter_ns": time.perf_counter_ns,
                               "cpu.options": tuple(sorted((str(k), repr(v)) for k, v in self.options.items()))}
        if self._flush is not None:
            fns["cpu.flush_buffer"] = self._flush
        if self._llc is not None:
            fns["cpu.llc_flush_buffer"] = self._llc
        return fns
