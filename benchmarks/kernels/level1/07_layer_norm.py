"""LayerNorm over the last dimension, written out by hand (mean and biased variance).

Naive reference: mean, centre, square, mean again for the variance, centre again, divide by
sqrt(var + eps), scale, shift: the centred tensor is computed twice and every step allocates a
full-size temporary (six of them).
Frozen baseline (baselines/07_layer_norm): centre once, rsqrt, affine in place.

No MLX port on purpose: on rows that are (nearly) constant the output is the rounding error of the
mean amplified by 1/sqrt(eps), so two frameworks that sum in different orders disagree far beyond
any fp32 tolerance; a cross-framework correctness check would be meaningless there.
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
AUTOTUNE_SHAPE_RANGES = {"batch_size": (1, 64), "dim": (2, 4096)}


class Model(nn.Module):
    def __init__(self, normalized_dim: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(normalized_dim))
        self.bias = nn.Parameter(torch.zeros(normalized_dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean = x.mean(dim=-1, keepdim=True)
        var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)
        return (x - mean) / torch.sqrt(var + self.eps) * self.weight + self.bias


def get_inputs():
    return [torch.randn(batch_size, dim) * 2.0 + 0.5]


def get_init_inputs():
    return [dim, 1e-5]
