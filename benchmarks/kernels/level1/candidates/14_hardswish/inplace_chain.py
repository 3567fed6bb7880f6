"""The reference's four kernels in the reference's order, but all writing into one buffer: one
allocation instead of four. Bit-identical to the reference."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.add(x, 3.0).clamp_(0.0, 6.0).mul_(x).div_(6.0)
