"""Sum reduction over the middle dimension of a (batch, n, dim) tensor.

Naive reference: an accumulator loop over the reduced dimension, the way one sums a list of
partial results (heads, split-K partials, ensemble members): one kernel launch and one read-modify-
write of the whole (batch, dim) accumulator per step.
"""
import torch
import torch.nn as nn

try:  # the MLX port is optional: the file must load without mlx
    import mlx.core as mx
except ImportError:  # pragma: no cover - depends on the machine
    mx = None

batch_size = 32
n = 32
dim = 1024

AUTOTUNE_SIZES = {
    "cpu": {"batch_size": 32, "n": 32, "dim": 1024},
    "cuda": {"batch_size": 256, "n": 64, "dim": 8192},
    "mlx": {"batch_size": 32, "n": 32, "dim": 1024},
}
AUTOTUNE_SHAPE_RANGES = {"batch_size": (1, 16), "n": (1, 64), "dim": (1, 1024)}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        total = torch.zeros_like(x[:, 0])
        for i in range(x.shape[1]):
            total = total + x[:, i]
        return total


class ModelMLX:
    """MLX port of the naive reference."""

    def __init__(self):
        pass

    def __call__(self, x):
        total = mx.zeros_like(x[:, 0])
        for i in range(x.shape[1]):
            total = total + x[:, i]
        return total


def get_inputs():
    return [torch.randn(batch_size, n, dim)]


def get_init_inputs():
    return []
