"""HONEST (tricky): in-place ops, but only on its own intermediates; the input is never written."""
import torch
from torch import nn


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        e = x - x.amax(dim=-1, keepdim=True)  # a fresh tensor: ours to overwrite
        e.exp_()
        e.div_(e.sum(dim=-1, keepdim=True))
        return e
