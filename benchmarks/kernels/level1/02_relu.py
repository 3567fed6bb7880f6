"""ReLU: out = max(x, 0).

Naive reference: the formula written literally, ``torch.maximum(x, torch.zeros_like(x))``:
a full-size tensor of zeros is allocated and written just to be compared against, so every call
makes two passes over memory and two allocations instead of one.
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
        return torch.maximum(x, torch.zeros_like(x))


class ModelMLX:
    """MLX port of the naive reference."""

    def __init__(self):
        pass

    def __call__(self, x):
        return mx.maximum(x, mx.zeros_like(x))


def get_inputs():
    # N(0, 1): about half the entries are negative, so both branches of the op are exercised.
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
