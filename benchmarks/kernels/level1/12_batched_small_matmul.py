"""Batched small matmuls: C[i] = A[i] @ B[i] for a batch of small matrices.

Naive reference: a Python loop over the batch, one GEMM call (plus dispatch overhead) per
matrix, then ``torch.stack`` copies the results into the output.
"""
import torch
import torch.nn as nn

try:  # the MLX port is optional: the file must load without mlx
    import mlx.core as mx
except ImportError:  # pragma: no cover - depends on the machine
    mx = None

batch_size = 128
m = 64
k = 64
n = 64

AUTOTUNE_SIZES = {
    "cpu": {"batch_size": 128, "m": 64, "k": 64, "n": 64},
    "cuda": {"batch_size": 128, "m": 512, "k": 512, "n": 512},
    "mlx": {"batch_size": 128, "m": 32, "k": 32, "n": 32},
}
AUTOTUNE_SHAPE_RANGES = {"batch_size": (1, 32), "m": (1, 64), "k": (1, 64), "n": (1, 64)}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.stack([torch.matmul(A[i], B[i]) for i in range(A.shape[0])])


class ModelMLX:
    """MLX port of the naive reference."""

    def __init__(self):
        pass

    def __call__(self, A, B):
        return mx.stack([mx.matmul(A[i], B[i]) for i in range(A.shape[0])])


def get_inputs():
    return [torch.randn(batch_size, m, k), torch.randn(batch_size, k, n)]


def get_init_inputs():
    return []
