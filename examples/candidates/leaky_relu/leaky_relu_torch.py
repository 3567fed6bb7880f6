"""Leaky ReLU with the library's kernel: one pass over x, one output, no scaled copy."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, negative_slope: float = 0.01):  # the same constructor as the problem's Model
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.leaky_relu(x, self.negative_slope)
