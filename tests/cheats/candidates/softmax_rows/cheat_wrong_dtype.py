"""CHEAT (contract): return float64 for a float32 problem. Caught by: the correctness gate (dtype)."""
import torch
from torch import nn


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x.double(), dim=-1)
