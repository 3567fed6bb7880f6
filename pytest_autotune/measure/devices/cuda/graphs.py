"""CUDA graphs for samples of calls too short to time one launch at a time (see the device's docstring).

A graph holds the ``k`` calls of one sample on static copies of the inputs; every sample stages its inputs into
them, replays, and copies the outputs out of graph-owned memory (which the next replay would overwrite).
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

import torch

from ....tree import tensors


class Graph:
    """One captured sample: ``k`` calls of one arm on static input buffers."""

    __slots__ = ("fn", "key", "graph", "static", "outputs", "inner", "inner_ok", "replays")

    def __init__(self, fn: Callable, key: tuple, graph: Any, static: list, outputs: list, inner: Any) -> None:
        self.fn = fn
        self.key = key
        self.graph = graph
        self.static = static  # [[tensor-or-value per argument] per call]
        self.outputs = outputs  # what each captured call returned (graph-owned memory)
        self.inner = inner  # (start, end) events recorded inside the graph, or None
        self.inner_ok: Optional[bool] = None
        self.replays = 0


class CaptureFailed(Exception):
    pass


def signature(batches: Sequence[Sequence[Any]]) -> Optional[tuple]:
    """What a graph depends on: per call, per argument, the tensor's geometry (or the plain value). ``None``
    if an argument cannot be staged into a static buffer (CPU tensor, unhashable object) or two arguments
    share memory (staging would break the aliasing)."""
    sig: list[tuple] = []
    seen: set[int] = set()
    for b in batches:
        row: list[tuple] = []
        for x in b:
            if isinstance(x, torch.Tensor):
                if x.device.type != "cuda" or x.is_sparse:
                    return None
                ptr = x.untyped_storage().data_ptr()
                if ptr in seen:
                    return None
                seen.add(ptr)
                row.append(("t", tuple(x.shape), tuple(x.stride()), x.storage_offset(), str(x.dtype), x.device.index,
                            x.untyped_storage().nbytes(), x.requires_grad))
            else:
                try:
                    hash(x)
                except TypeError:
                    return None
                row.append(("v", type(x).__name__, x))
        sig.append(tuple(row))
    return tuple(sig)


def static_copies(batches: Sequence[Sequence[Any]]) -> list:
    """Static inputs with the same geometry as the real ones (storage size, offset, strides: alignment and
    layout are what the candidate sees either way)."""
    static = []
    for b in batches:
        row = []
        for x in b:
            if isinstance(x, torch.Tensor):
                storage = torch.UntypedStorage(x.untyped_storage().nbytes(), device=x.device)
                t = torch.empty(0, dtype=x.dtype, device=x.device)
                t.set_(storage, x.storage_offset(), x.size(), x.stride())
                with torch.no_grad():
                    t.copy_(x)
                t.requires_grad_(x.requires_grad)
                row.append(t)
            else:
                row.append(x)
        static.append(row)
    return static


def stage(static: list, batches: Sequence[Sequence[Any]]) -> None:
    dst, src = [], []
    for srow, b in zip(static, batches):
        for s, x in zip(srow, b):
            if isinstance(s, torch.Tensor):
                dst.append(s)
                src.append(x)
    with torch.no_grad():
        try:
            torch._foreach_copy_(dst, src)
        except (AttributeError, RuntimeError, TypeError):
            for s, x in zip(dst, src):
                s.copy_(x)


def copy_tree(out: Any) -> Any:
    if isinstance(out, torch.Tensor):
        return out.detach().clone()
    if isinstance(out, tuple):
        return tuple(copy_tree(o) for o in out)
    if isinstance(out, list):
        return [copy_tree(o) for o in out]
    return out


def poison(outputs: Any) -> None:
    """Overwrite graph-owned outputs: NaN where floating point, 0 elsewhere."""
    floats: list[torch.Tensor] = []
    others: list[torch.Tensor] = []
    for t in tensors(outputs):
        (floats if (t.is_floating_point() or t.is_complex()) else others).append(t.detach())
    with torch.no_grad():
        for group, value in ((floats, float("nan")), (others, 0)):
            if not group:
                continue
            try:
                torch._foreach_zero_(group)
                if value != 0:
                    torch._foreach_add_(group, value)
            except (AttributeError, RuntimeError, TypeError):
                for t in group:
                    t.fill_(value)


#: GPU clock cycles of the spin queued ahead of a replay's start event (~50 us at 2 GHz): the host launches the
#: graph while the GPU spins, so the launch latency is not timed. Safe in graph mode only: a captured call
#: cannot leave work on a stream the graph does not join, so nothing of the sample runs beside the spin.
PREROLL_CYCLES = 100_000


def preroll() -> None:
    try:
        torch.cuda._sleep(PREROLL_CYCLES)
    except (AttributeError, RuntimeError):
        pass


def inner_seconds(inner: tuple, outer0: Any, outer1: Any) -> Optional[float]:
    """Time between the two events recorded inside the graph -- only if this replay recorded them: both lie
    between the events recorded around the replay (an event left from an earlier record would not)."""
    try:
        lead = outer0.elapsed_time(inner[0])
        body = inner[0].elapsed_time(inner[1])
        tail = inner[1].elapsed_time(outer1)
    except RuntimeError:
        return None
    if lead < 0 or tail < 0 or body <= 0:
        return None
    return body * 1e-3


def external_events(stream: Any) -> Optional[tuple]:
    """Timing events that become event-record nodes when recorded during a capture (``cudaEventRecordExternal``);
    ``None`` where this torch has no such events. Recorded once outside the capture, so the CUDA events exist
    before it begins (torch creates them lazily, at the first record)."""
    try:
        events = (torch.cuda.Event(enable_timing=True, external=True),
                  torch.cuda.Event(enable_timing=True, external=True))
        for e in events:
            e.record(stream)
        stream.synchronize()
        return events
    except (TypeError, RuntimeError):
        return None
