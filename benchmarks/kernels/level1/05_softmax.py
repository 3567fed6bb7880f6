"""Softmax over the last dimension.

Naive reference: the numerically stable textbook version without any fusion: row max,
subtract (temporary), exp (temporary), row sum, divide (output). Three full-size allocations
and five passes over the data.
"""
import torch
import torch.nn as nn

batch_size = 128
dim = 4096

AUTOTUNE_SIZES = {
    "cpu": {"batch_size": 128, "dim": 4096},
    "cuda": {"batch_size": 8192, "dim": 8192},
    "mlx": {"batch_size": 128, "dim": 4096},
}
AUTOTUNE_SHAPE_RANGES = {"batch_size": (1, 64), "dim": (1, 4096)}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        row_max = torch.max(x, dim=-1, keepdim=True).values
        e = torch.exp(x - row_max)
        return e / torch.sum(e, dim=-1, keepdim=True)


def get_inputs():
    return [torch.randn(batch_size, dim) * 4.0]


def get_init_inputs():
    return []
