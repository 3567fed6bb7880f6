"""Fused pair: Linear (x @ W^T), + bias, ReLU.

Naive reference: three separate ops: the GEMM writes a temporary, the bias add reads it and
writes a second one, ReLU reads that and writes the output.
"""
import math

import torch
import torch.nn as nn

batch_size = 1024
in_features = 32
out_features = 512

AUTOTUNE_SIZES = {
    "cpu": {"batch_size": 1024, "in_features": 32, "out_features": 512},
    "cuda": {"batch_size": 8192, "in_features": 4096, "out_features": 8192},
    "mlx": {"batch_size": 1024, "in_features": 32, "out_features": 512},
}
AUTOTUNE_SHAPE_RANGES = {"batch_size": (1, 256), "in_features": (1, 256), "out_features": (1, 512)}


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(out_features, in_features) / math.sqrt(in_features))
        self.bias = nn.Parameter(0.1 * torch.randn(out_features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.matmul(x, self.weight.t())
        y = y + self.bias
        return torch.relu(y)


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
