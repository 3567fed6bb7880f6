"""Softmax over the last dimension in Triton: one program per row, the whole row in registers (BLOCK_SIZE: the
next power of two of its length), max, exp, sum and the division fused into one read and one write. The number of
warps is autotuned per row length (``triton.autotune``), in the build stage: the build sandbox runs the model once
on the problem's inputs, Triton compiles and benchmarks there, and its cache (kernels and the chosen
configuration, ``TRITON_CACHE_AUTOTUNING``) goes to every later sandbox of the item, so timed samples neither
compile nor autotune.

Collected with ``--device=cuda`` only (``candidates/<problem>/cuda/``); docs/guide/compiled-candidates.md.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.autotune(configs=[triton.Config({}, num_warps=w) for w in (4, 8, 16)], key=["n_cols"])
@triton.jit
def _softmax_rows(x_ptr, y_ptr, x_stride, y_stride, n_cols, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * x_stride + cols, mask=mask, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    e = tl.exp(x)
    tl.store(y_ptr + row * y_stride + cols, e / tl.sum(e, axis=0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype != torch.float32 or x.dim() == 0 or x.shape[-1] > 65536:
            return torch.softmax(x, dim=-1)
        x2 = x.reshape(-1, x.shape[-1]).contiguous()
        y = torch.empty_like(x2)
        n_rows, n_cols = x2.shape
        if n_rows and n_cols:
            _softmax_rows[(n_rows,)](x2, y, x2.stride(0), y.stride(0), n_cols,
                                     BLOCK_SIZE=triton.next_power_of_2(n_cols))
        return y.reshape(x.shape)
