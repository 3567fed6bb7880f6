"""A float32 linear layer, y = x W^T + b, written as a matmul plus a separate bias add."""
import torch
from torch import nn

batch = 64
features = 512

AUTOTUNE_SIZES = {"cpu": {"batch": 64, "features": 512}, "cuda": {"batch": 4096, "features": 4096}}


class Model(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(features, features) / features**0.5)
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.weight.t() + self.bias


def get_inputs():
    return [torch.randn(batch, features)]


def get_init_inputs():
    return [features]
