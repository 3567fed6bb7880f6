"""L2-normalise rows: x / max(||x||_2, eps), norm over dim 1.

Naive reference: square (temporary), row sum, sqrt, clamp, divide.
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
    def __init__(self, eps: float = 1e-12):
        super().__init__()
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        norm = torch.sqrt(torch.sum(x ** 2, dim=1, keepdim=True))
        return x / torch.clamp(norm, min=self.eps)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [1e-12]
