"""BROKEN: defines no ModelNew. Caught by: the item fails at load with the file and the reason."""
import torch
from torch import nn


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=-1)
