"""Leaky ReLU, the example problem of the guide (docs/guide/candidates.md): out = max(x, slope * x).

A KernelBench-format problem: ``Model`` is the naive reference (the formula written literally: a full-size scaled
copy of x is allocated, written and read back to be compared against x), ``get_inputs()`` the inputs of one call,
``get_init_inputs()`` the constructor's arguments.
"""
import torch
import torch.nn as nn

batch_size = 256
dim = 4096

AUTOTUNE_SIZES = {
    "cpu": {"batch_size": 256, "dim": 4096},
    "cuda": {"batch_size": 8192, "dim": 16384},
}
AUTOTUNE_SHAPE_RANGES = {"batch_size": (1, 64), "dim": (1, 4096)}


class Model(nn.Module):
    def __init__(self, negative_slope: float = 0.01):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.maximum(x, x * self.negative_slope)


def get_inputs():
    # N(0, 1): about half the entries are negative, so both branches of the op are exercised
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
