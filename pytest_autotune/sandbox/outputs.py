"""What a candidate returned, inspected and exported without running any of the candidate's code.

A candidate's output must be plain data: exactly ``torch.Tensor`` (not a subclass, not a Parameter, no Python
dispatch key, not meta/fake/lazy), or an exact ``tuple``/``list`` of them. Anything else could run code when it
is read -- a ``__torch_function__`` subclass that computes the rest of its rows on first use, a
``__torch_dispatch__`` wrapper -- and move the candidate's work out of its timed call into the harness's reads
(docs/design/threat-model.md, "lazy outputs"). So :func:`output_problem` looks only at ``type()`` (which no object can
fake) and at the tensor's dispatch keys before any method is called, and everything that reads an output
afterwards runs with torch functions disabled (:func:`harness_reads`), so even a missed override stays silent.
The sandbox reports what it found; the controller's correctness and integrity gates decide.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any, Iterator, Optional

import torch

from ..measure.devices.base import Device
from ..tree import float64_sums, leaves


#: torch's mode stacks: a mode left pushed sees every tensor the harness builds or reads afterwards
def mode_stack_depths() -> dict[str, int]:
    return {"torch_function": int(torch._C._len_torch_function_stack()),
            "torch_dispatch": int(torch._C._len_torch_dispatch_stack())}


def modes_left(depths: dict[str, int]) -> Optional[str]:
    pushed = [f"{n} {k.replace('_', ' ')} mode(s)" for k, n in depths.items() if n]
    return ", ".join(pushed) if pushed else None


@contextlib.contextmanager
def harness_reads() -> Iterator[None]:
    """Harness code that touches tensors a candidate could have seen: no torch-function subclass or mode runs."""
    with torch._C.DisableTorchFunction():
        yield


def _allowed_keys(t: torch.Tensor) -> int:
    return _allowed_keys_for(t.dtype, t.device)


@functools.lru_cache(maxsize=64)
def _allowed_keys_for(dtype: torch.dtype, device: torch.device) -> int:
    """Dispatch keys of a fresh tensor of the same device and dtype, plus the lazy conjugate/negative bits (those
    materialise in C++, never in candidate code)."""
    keys = torch._C._dispatch_keys(torch.empty(0, dtype=dtype, device=device))
    for name in ("Conjugate", "Negative"):
        key = getattr(torch._C.DispatchKey, name, None)
        if key is not None:
            keys = keys.add(key)
    return keys.raw_repr()


def tensor_problem(t: Any, expected_device: str) -> Optional[str]:
    """Why ``t`` is not a plain tensor of ``expected_device`` (``None`` if it is)."""
    tp = type(t)
    if tp is not torch.Tensor:
        if isinstance(t, torch.Tensor):
            return (f"a {tp.__module__}.{tp.__qualname__}, a subclass of torch.Tensor (outputs must be plain "
                    "torch.Tensor: a subclass can run code when the harness reads it)")
        return f"a {tp.__module__}.{tp.__qualname__}, not a tensor"
    with harness_reads():
        if t.layout != torch.strided:
            return f"a {t.layout} tensor (outputs must be dense)"
        if t.is_meta or t.device.type != expected_device:
            return f"a tensor on {t.device.type!r}, expected {expected_device!r}"
        extra = torch._C._dispatch_keys(t).raw_repr() & ~_allowed_keys(t)
        if extra:
            return (f"a tensor with extra dispatch keys {torch._C._dispatch_keys(t)} (a functional, batched or "
                    "Python-dispatch tensor; outputs must be plain)")
    return None


def output_problem(out: Any, expected_device: str) -> Optional[str]:
    """Why ``out`` is not a plain tensor or an exact tuple/list of plain tensors (``None`` if it is)."""
    tp = type(out)
    if tp in (tuple, list):
        if not out:
            return f"an empty {tp.__name__}, not a tensor"
        for i, item in enumerate(out):
            inner = output_problem(item, expected_device) if type(item) in (tuple, list) else (
                tensor_problem(item, expected_device))
            if inner:
                return f"{inner} (position {i} of its {tp.__name__})"
        return None
    if isinstance(out, (tuple, list)):
        return f"a {tp.__module__}.{tp.__qualname__} (a subclass of {tp.__mro__[1].__name__}; return a plain tuple)"
    return tensor_problem(out, expected_device)


class HarnessRefusal(Exception):
    """The candidate left the process in a state the harness will not work in (a mode pushed, ...)."""


def structure(out: Any) -> str:
    return "tensor" if type(out) is torch.Tensor else "tuple"


def export_output(device: Device, out: Any) -> list[dict]:
    """Handles for every tensor of a plain output (see ``Device.export_tensor``)."""
    with harness_reads():
        return [device.export_tensor(t) for t in leaves(out)]


#: elements per float64 chunk of a fingerprint (32 MiB)
_FP_CHUNK = 1 << 22


def fingerprints(outs: list, gen: torch.Generator, n_positions: int) -> list[list[dict]]:
    """Cheap summaries of plain outputs at positions drawn now, one list of per-leaf dicts per output: float64 sums
    and a few values, computed where each output lives. On a GPU they are device reductions whose scalars all
    reach the host in one copy per device: a round of the 4 us yardstick keeps 400 outputs, and with a copy (and
    its synchronisation) per sum and per value set its rounds took 250-350 ms between samples on the H200, 190-220
    ms with one (docs/results/h200-2026-12-02.md#duty-cycle)."""
    pending: list[tuple[dict, torch.Tensor, int]] = []  # (leaf's print, its values and sums on its device, count)
    prints: list[list[dict]] = []
    with harness_reads():
        for out in outs:
            per_out: list[dict[str, Any]] = []
            for t in leaves(out):
                flat = t.detach().reshape(-1)
                n = flat.numel()
                if n == 0:
                    per_out.append({"numel": 0})
                    continue
                idx = torch.randint(0, n, (min(n_positions, n),), generator=gen)
                # sums accumulated in float64, with no full-size temporary beside the outputs
                sums = float64_sums(flat, _FP_CHUNK)
                values = flat[idx.to(flat.device)].to(torch.float64)
                leaf = {"numel": n, "shape": list(t.shape), "dtype": str(t.dtype).replace("torch.", ""), "index": idx}
                per_out.append(leaf)
                pending.append((leaf, torch.cat([sums, values]), idx.numel()))
            prints.append(per_out)
        by_device: dict[torch.device, list[tuple[dict, torch.Tensor, int]]] = {}
        for entry in pending:
            by_device.setdefault(entry[1].device, []).append(entry)
        for entries in by_device.values():
            host = torch.cat([packed for _, packed, _ in entries]).cpu()
            at = 0
            for leaf, _, m in entries:
                leaf["sum"], leaf["abs_sum"] = float(host[at]), float(host[at + 1])
                leaf["values"] = host[at + 2:at + 2 + m].clone()
                at += 2 + m
    return prints


def bits_equal(a: Any, b: Any) -> bool:
    """Bitwise equality of two plain tensors or sequences (NaN-safe, sign-of-zero-safe), on their device."""
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        with harness_reads():
            if a.dtype == torch.bool:
                return torch.equal(a, b)
            if a.is_floating_point() or a.is_complex():
                size = a.element_size()
                if a.is_complex():
                    a, b = torch.view_as_real(a), torch.view_as_real(b)
                    size //= 2
                it = {8: torch.int64, 4: torch.int32, 2: torch.int16, 1: torch.int8}[size]
                return torch.equal(a.contiguous().view(it), b.contiguous().view(it))
            return torch.equal(a, b)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(bits_equal(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


__all__ = ["output_problem", "tensor_problem", "leaves", "structure", "export_output", "fingerprints", "bits_equal",
           "mode_stack_depths", "modes_left", "harness_reads"]
