"""Scaled add (axpy): out = alpha * x + y.

Naive reference: ``alpha * x + y`` as written, i.e. two elementwise kernels and one full-size
temporary (the product), which is allocated, written, read back and freed on every call.
alpha is 2.0, a power of two, so the product is exact and a fused multiply-add gives the very
same bits as the two-step reference, subnormals included.
"""
import torch
import torch.nn as nn

try:  # the MLX port is optional: the file must load without mlx
    import mlx.core as mx
except ImportError:  # pragma: no cover - depends on the machine
    mx = None

batch_size = 256
dim = 4096

AUTOTUNE_SIZES = {
    "cpu": {"batch_size": 256, "dim": 4096},
    "cuda": {"batch_size": 8192, "dim": 16384},
    "mlx": {"batch_size": 256, "dim": 4096},
}
AUTOTUNE_SHAPE_RANGES = {"batch_size": (1, 64), "dim": (1, 4096)}


class Model(nn.Module):
    def __init__(self, alpha: float):
        super().__init__()
        self.alpha = alpha

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.alpha * x + y


class ModelMLX:
    """MLX port of the naive reference (same two-step arithmetic)."""

    def __init__(self, alpha: float):
        self.alpha = alpha

    def __call__(self, x, y):
        return self.alpha * x + y


def get_inputs():
    x = torch.randn(batch_size, dim)
    y = torch.randn(batch_size, dim)
    return [x, y]


def get_init_inputs():
    return [2.0]
