"""Same two kernels as the reference, but the product is written into the sigmoid's buffer, so one
full-size allocation (and its first-touch page faults) disappears. Bit-identical to the reference."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(x).mul_(x)
