"""HONEST (tricky): work done once in __init__ (a contiguous transposed copy of the weight, kept as a buffer)
and a fused addmm per call. The output is allocated fresh on every call; nothing is cached across calls."""
import torch
from torch import nn


class ModelNew(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        # same construction order as the reference, so the seeded parameters agree
        self.weight = nn.Parameter(torch.randn(features, features) / features**0.5)
        self.bias = nn.Parameter(torch.randn(features))
        self.register_buffer("weight_t", self.weight.detach().t().contiguous())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.addmm(self.bias, x, self.weight_t)
