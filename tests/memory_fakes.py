"""A simulated GPU's memory for the memory plan's tests (tests/test_memory_stages.py): processes with a caching
allocator each, the driver's list of processes (NVML's view), and a device object for the controller.

Each :class:`SimProcess` keeps what it freed, as PyTorch's caching allocator does for large blocks: allocations are
rounded to 2 MiB and carved from the smallest free block that holds them (the rest stays free in that segment);
where none does, a new segment comes from the device, and where the device has too little free, the process first
gives back its own wholly free segments and tries again -- it can never take another process's. ``empty_cache``
gives back every wholly free segment. The device's free memory is its total less every process's context and
segments. A closed process keeps its memory for a number of the driver's polls (a context being torn down).
Nothing here touches a GPU; the numbers are the tests'.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Optional

GIB = 1 << 30
ROUND = 2 << 20


class SimOOM(Exception):
    def __init__(self, who: str, size: int, free: int) -> None:
        super().__init__(f"{who} ran out of device memory: {size / GIB:.2f} GiB asked, {free / GIB:.2f} GiB free")
        self.who = who


@dataclass(eq=False)
class Block:
    size: int
    seg: list
    used: bool = False


@dataclass(eq=False)
class SimProcess:
    gpu: "SimGpu"
    name: str
    pid: int
    context: int = GIB
    segments: list = field(default_factory=list)
    closing_polls: Optional[int] = None  # closed: the driver still lists it for this many polls

    @property
    def reserved(self) -> int:
        return sum(b.size for seg in self.segments for b in seg)

    @property
    def allocated(self) -> int:
        return sum(b.size for seg in self.segments for b in seg if b.used)

    def alloc(self, n: int) -> Block:
        n = -(-max(n, 1) // ROUND) * ROUND
        free = [b for seg in self.segments for b in seg if not b.used and b.size >= n]
        if free:
            b = min(free, key=lambda b: b.size)
            if b.size > n:
                rest = Block(b.size - n, b.seg)
                b.seg.insert(b.seg.index(b) + 1, rest)
                b.size = n
        else:
            if self.gpu.free() < n:
                self.empty_cache()
            if self.gpu.free() < n:
                raise SimOOM(self.name, n, self.gpu.free())
            seg: list = []
            b = Block(n, seg)
            seg.append(b)
            self.segments.append(seg)
        b.used = True
        self.gpu.peak = max(self.gpu.peak, self.gpu.used())
        return b

    def free(self, b: Optional[Block]) -> None:
        if b is None:
            return
        b.used = False
        seg = b.seg
        i = seg.index(b)
        if i + 1 < len(seg) and not seg[i + 1].used:
            b.size += seg.pop(i + 1).size
        if i > 0 and not seg[i - 1].used:
            seg[i - 1].size += seg.pop(i).size

    def empty_cache(self) -> None:
        self.segments = [seg for seg in self.segments if any(b.used for b in seg)]

    def close(self, polls: int = 0) -> None:
        """The process exits; the driver lists it (and its memory stays taken) for ``polls`` more polls."""
        self.closing_polls = polls


@dataclass
class SimGpu:
    total: int
    procs: dict = field(default_factory=dict)  # pid -> SimProcess
    peak: int = 0

    def process(self, name: str, pid: int, context: int = GIB) -> SimProcess:
        p = SimProcess(self, name, pid, context)
        self.procs[pid] = p
        return p

    def used(self) -> int:
        return sum(p.context + p.reserved for p in self.procs.values())

    def free(self) -> int:
        return self.total - self.used()

    # NVML's view (measure/gpu_processes.py GpuProcessSource)
    def running(self) -> dict[int, tuple[int, Optional[int]]]:
        out = {}
        for pid, p in list(self.procs.items()):
            if p.closing_polls is not None:
                if p.closing_polls <= 0:
                    del self.procs[pid]
                    continue
                p.closing_polls -= 1
            out[pid] = (0, p.context + p.reserved)
        return out

    def busy_since_last(self) -> dict[int, int]:
        return {}

    def pids_match(self) -> bool:
        return True


class SimDevice:
    """The controller's device object over a :class:`SimGpu` (the part item_memory and memory_holders use)."""

    name = "cuda"
    index = 0
    framework = "torch"
    options: dict = {}

    def __init__(self, gpu: SimGpu, controller: SimProcess) -> None:
        self.gpu, self.controller = gpu, controller
        self.releases = 0

    def memory_info(self) -> tuple[int, int]:
        return self.gpu.free(), self.gpu.total

    def release_cached_memory(self) -> None:
        self.releases += 1
        self.controller.empty_cache()

    def peak_memory(self) -> tuple[int, int]:
        return self.controller.allocated, self.controller.allocated

    def process_overhead_bytes(self) -> int:
        return GIB

    def fingerprint(self) -> dict:
        return {"name": "Simulated H100 80GB"}


@dataclass(eq=False)
class Box:
    """A sandbox as the pool lists it (``SandboxPool.started``)."""

    pid: int
    closed: bool = False


def controller_pid() -> int:
    return os.getpid()


__all__ = ["Block", "Box", "GIB", "SimDevice", "SimGpu", "SimOOM", "SimProcess", "controller_pid"]
