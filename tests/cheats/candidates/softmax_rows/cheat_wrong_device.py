"""CHEAT (contract): return a tensor on the 'meta' device (a shape with no data: free to "compute").
Caught by: the correctness gate (output device), as a rejection -- not a sandbox crash."""
import torch
from torch import nn


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.empty(x.shape, dtype=x.dtype, device="meta")
