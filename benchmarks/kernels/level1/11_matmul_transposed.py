"""Matmul with a transposed operand: C = A @ B^T, A is (M, K), B is (N, K).

Naive reference: materialises B^T with ``.t().contiguous()`` before multiplying, so every call
pays a full strided copy of B (and its allocation) on top of the GEMM. BLAS takes a transposed
operand directly.
"""
import torch
import torch.nn as nn

M = 64
K = 512
N = 2048

AUTOTUNE_SIZES = {
    "cpu": {"M": 64, "K": 512, "N": 2048},
    "cuda": {"M": 8192, "K": 4096, "N": 8192},
    "mlx": {"M": 64, "K": 512, "N": 2048},
}
AUTOTUNE_SHAPE_RANGES = {"M": (1, 256), "K": (1, 512), "N": (1, 512)}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        B_t = B.t().contiguous()
        return torch.matmul(A, B_t)


def get_inputs():
    return [torch.randn(M, K), torch.randn(N, K)]


def get_init_inputs():
    return []
