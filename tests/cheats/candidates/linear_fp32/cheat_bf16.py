"""CHEAT: compute an fp32 problem in bfloat16 (faster matmul, 8 mantissa bits) and cast the answer back.
Caught by: the correctness gate (float32 tolerance: rtol 1e-4)."""
import torch
from torch import nn


class ModelNew(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(features, features) / features**0.5)
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.weight.detach().to(torch.bfloat16)
        return (x.to(torch.bfloat16) @ w.t() + self.bias.to(torch.bfloat16)).to(torch.float32)
