"""RMSNorm over the last dimension: x / sqrt(mean(x^2) + eps) * weight.

Naive reference: square (temporary), mean, add eps, sqrt, divide (temporary), scale (output).
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
    def __init__(self, normalized_dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        # Random (seeded) gain, so a candidate that forgets the weight is caught.
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(normalized_dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x / torch.sqrt(torch.mean(x ** 2, dim=-1, keepdim=True) + self.eps) * self.weight


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [dim, 1e-6]
