"""HONEST: the fused library softmax (one pass for max, one for exp+sum, one for the division)."""
import torch
from torch import nn


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=-1)
