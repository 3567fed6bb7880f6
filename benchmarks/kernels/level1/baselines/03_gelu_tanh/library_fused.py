"""Frozen "previous best" for tanh-GELU: the library kernel, ``F.gelu(approximate="tanh")``.

It already beats the naive op-by-op reference, so a candidate has to beat this, not just the
strawman. (On a single CPU thread it is not the fastest option: see candidates/.)"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x, approximate="tanh")
