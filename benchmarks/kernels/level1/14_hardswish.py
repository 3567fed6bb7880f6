"""Elementwise chain: hard-swish, x * clamp(x + 3, 0, 6) / 6.

Naive reference: the chain as written: add, clamp, multiply, divide, each its own kernel with its
own full-size temporary.
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
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.clamp(x + 3.0, 0.0, 6.0) / 6.0


class ModelMLX:
    """MLX port of the naive reference."""

    def __init__(self):
        pass

    def __call__(self, x):
        return x * mx.clip(x + 3.0, 0.0, 6.0) / 6.0


def get_inputs():
    # Spread over [-6, 6) so all three pieces of the function (0, quadratic, identity) are hit.
    return [torch.randn(batch_size, dim) * 3.0]


def get_init_inputs():
    return []
