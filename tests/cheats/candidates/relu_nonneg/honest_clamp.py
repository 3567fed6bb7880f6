"""HONEST (tricky): a tensor constant created at module top level, used in every call. The output is fresh."""
import torch
from torch import nn

_ZERO = torch.zeros(())


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.maximum(x, _ZERO)
