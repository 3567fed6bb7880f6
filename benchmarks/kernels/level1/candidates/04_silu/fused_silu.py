"""ATen's fused SiLU kernel: x / (1 + exp(-x)) per element, one read, one write, no temporary."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.silu(x)
