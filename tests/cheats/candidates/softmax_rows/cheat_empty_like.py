"""CHEAT: return torch.empty_like(x) -- no work at all -- hoping the allocator hands back memory that still holds
an answer (the baseline's freed output for the same input).
Caught by: the correctness gate (the baseline never runs beside the correctness calls, and its timed outputs are
overwritten with NaN before they are freed)."""
import torch
from torch import nn


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.empty_like(x)
