"""SiLU / swish: out = x * sigmoid(x).

Naive reference: ``x * torch.sigmoid(x)``, two kernels and one full-size temporary.
"""
import torch
import torch.nn as nn

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
        return x * torch.sigmoid(x)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
