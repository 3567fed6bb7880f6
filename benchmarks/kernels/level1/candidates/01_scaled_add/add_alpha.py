"""One kernel instead of two: ``torch.add(y, x, alpha=alpha)`` reads x and y once and writes the
output once; no temporary for the product. (alpha = 2 makes the fused multiply-add bit-identical.)"""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, alpha: float):
        super().__init__()
        self.alpha = alpha

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.add(y, x, alpha=self.alpha)
