"""What one pytest process measures on: the options its device object takes from the protocol, and the CPU the
sandboxes of its items are pinned to (docs/architecture.md#arms-in-separate-processes). Pure functions of the
protocol and the process's place among xdist workers; the session (session.py) calls them."""

from __future__ import annotations

import os
from typing import Optional

from .protocol import Protocol


def device_options(protocol: Protocol, device: str, memory_bytes: Optional[int] = None) -> dict:
    """The device object's options: the protocol's section for ``device`` and ``--autotune-device-memory``."""
    memory = {"memory_bytes": memory_bytes} if memory_bytes else {}
    if device == "cuda":
        c = protocol.devices.cuda
        return {"l2_flush_factor": c.l2_flush_factor, "graph_below_s": c.graph_below_s,
                "head_start": c.head_start, "head_start_max_s": c.head_start_max_s,
                "process_overhead_bytes": protocol.memory.process_overhead_mb << 20, **memory}
    if device == "cpu":
        cpu = protocol.devices.cpu
        return {"cache_flush_factor": cpu.cache_flush_factor, "placement_span_kib": cpu.placement_span_kib,
                "llc_flush_factor": cpu.llc_flush_factor, **memory}
    return memory


def sandbox_cpus(protocol: Protocol, worker_number: int) -> Optional[list[int]]:
    """[timing].pin = "same-cpu": the main threads of both sandboxes of an item share one CPU, so neither arm gets a
    quieter core (the controller keeps the last allowed CPU for them; xdist worker gwN: the N-th from the end). Only
    the main thread: on a GPU the runtime's own threads must stay free (confining them with it slowed launch-bound
    calls on an H200), and unpinned main threads moved an A/A by 0.5% there (docs/results/h200.md)."""
    if protocol.timing.pin != "same-cpu" or not hasattr(os, "sched_getaffinity"):
        return None
    allowed = sorted(os.sched_getaffinity(0))
    return [allowed[-1 - (worker_number % len(allowed))]]
