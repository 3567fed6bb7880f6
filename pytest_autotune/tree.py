"""Outputs as trees: a tensor, or nested tuples/lists of tensors (and the odd non-tensor a broken candidate
returns). The one flattener every part of the harness uses."""

from __future__ import annotations

import math
from typing import Any

import torch


def leaves(out: Any) -> list:
    """Every leaf of ``out`` in order, tensors or not (a non-sequence is its own single leaf)."""
    if isinstance(out, (list, tuple)):
        return [x for o in out for x in leaves(o)]
    return [out]


def tensors(out: Any) -> list[torch.Tensor]:
    """The tensor leaves of ``out``, in order."""
    return [x for x in leaves(out) if isinstance(x, torch.Tensor)]


#: elements per row of a fingerprint's two-level sum (float32 within a row, float64 across rows)
SUM_ROW = 4096
#: elements of the CPU's |x| copy at a time (float64_sums): 512 KiB, so the second read of a chunk hits the L2
CPU_ABS_CHUNK = 1 << 17


def abs_max(t: torch.Tensor) -> float:
    """``max |t|`` as a float with no full-size temporary (``t.abs().max()`` allocates one as large as ``t``: at
    published sizes a 7.5 GB copy in the controller, beside the golden output it measures); NaN if ``t`` holds one."""
    if t.numel() == 0:
        return 0.0
    if t.dtype == torch.bool:
        return 1.0 if bool(t.any()) else 0.0
    lo, hi = (float(v) for v in torch.stack(list(torch.aminmax(t))).to(torch.float64).tolist())
    if math.isnan(lo) or math.isnan(hi):
        return math.nan
    return max(abs(lo), abs(hi))


def float64_sums(flat: torch.Tensor, chunk: int) -> torch.Tensor:
    """``[sum(x), sum(|x|)]`` of a 1-D tensor as float64 scalars on its device, with no full-size temporary.

    float32 / float16 / bfloat16: two levels -- each row of :data:`SUM_ROW` elements reduced in float32 (one kernel,
    no copy for float32; half types cast one ``chunk`` at a time), the row sums added in float64. The float32 error of
    a 4096-element row is below 1e-6 of its absolute sum, two orders under the loosest tolerance the sums are
    compared with (``rtol`` x sum|x|, gates/compare.py). On the H200 this replaced a float64 copy of every chunk
    (a conversion pass, an abs pass and two sums per chunk): a fingerprint of a 256 MiB output went from ~1.6 ms
    to a single read of it. Other dtypes (float64, integers, bool): float64 copies of one ``chunk`` at a time.
    The golden side (gates/compare.py) and the sandbox's fingerprint both call this, so the two sums differ only
    by the outputs."""
    acc = torch.zeros(2, dtype=torch.float64, device=flat.device)
    n = flat.numel()
    if flat.dtype in (torch.float32, torch.float16, torch.bfloat16):
        rows = n // SUM_ROW
        on_cpu = flat.device.type == "cpu"
        # the CPU's |x| row sums go through an abs copy of at most CPU_ABS_CHUNK elements: its vector_norm(1) took
        # 0.48 ms for 0.5M floats against 0.10 ms for abs().sum(), and fingerprints were ~20% of a timing round
        # (docs/design/protocol.md#derived-input-sets); the GPU keeps its one read
        step = (min(n, CPU_ABS_CHUNK) if on_cpu else n) if flat.dtype == torch.float32 else chunk
        step = max(step // SUM_ROW, 1) * SUM_ROW
        for i in range(0, rows * SUM_ROW, step):
            body = flat[i:min(i + step, rows * SUM_ROW)].reshape(-1, SUM_ROW)
            acc[0] += body.sum(dim=1, dtype=torch.float32).sum(dtype=torch.float64)
            if on_cpu:
                acc[1] += body.abs().sum(dim=1, dtype=torch.float32).sum(dtype=torch.float64)
            else:
                acc[1] += torch.linalg.vector_norm(body, 1, dim=1, dtype=torch.float32).sum(dtype=torch.float64)
        tail = flat[rows * SUM_ROW:].to(torch.float64)
        if tail.numel():
            acc[0] += tail.sum()
            acc[1] += tail.abs().sum()
        return acc
    for i in range(0, n, chunk):
        c64 = flat[i:i + chunk].to(torch.float64)
        acc[0] += c64.sum()
        acc[1] += c64.abs().sum()
    return acc


__all__ = ["leaves", "tensors", "float64_sums"]
