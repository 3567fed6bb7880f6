"""GELU, tanh approximation: 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3))).

Naive reference: the formula from the paper written out op by op. Each operator is its own
kernel with its own full-size temporary: pow, scale, add, scale, tanh, add, scale, multiply:
eight allocations and eight passes over memory.
Frozen baseline (baselines/03_gelu_tanh): the library's fused kernel,
``F.gelu(approximate="tanh")``, which on this CPU is only modestly faster than the naive chain.
"""
import math

import torch
import torch.nn as nn

try:  # the MLX port is optional: the file must load without mlx
    import mlx.core as mx
except ImportError:  # pragma: no cover - depends on the machine
    mx = None

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)

batch_size = 128
dim = 4096

AUTOTUNE_SIZES = {
    "cpu": {"batch_size": 128, "dim": 4096},
    "cuda": {"batch_size": 8192, "dim": 8192},
    "mlx": {"batch_size": 32, "dim": 4096},
}
AUTOTUNE_SHAPE_RANGES = {"batch_size": (1, 64), "dim": (1, 4096)}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class ModelMLX:
    """MLX port of the naive reference (the same op-by-op formula, ``mx.power`` for the cube)."""

    def __init__(self):
        pass

    def __call__(self, x):
        return 0.5 * x * (1.0 + mx.tanh(_SQRT_2_OVER_PI * (x + 0.044715 * mx.power(x, 3.0))))


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
