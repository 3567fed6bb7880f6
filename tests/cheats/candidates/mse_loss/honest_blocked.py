"""HONEST: the loss from 256 partial sums and their total (what a GPU block reduction does), in float32.
Must stay accepted: its error against float64 is the reference's own order."""
import torch
from torch import nn


class ModelNew(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        d = a - b
        return (d * d).reshape(256, -1).sum(dim=1).sum() / a.numel()
