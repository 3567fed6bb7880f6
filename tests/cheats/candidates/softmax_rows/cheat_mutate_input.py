"""CHEAT: compute in place in the input's storage (no allocation) and return the input itself.
The values are right; the caller's input is destroyed.
Caught by: the correctness gate (inputs must be unchanged after the call)."""
import torch
from torch import nn


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x.sub_(x.amax(dim=-1, keepdim=True)).exp_()
        x.div_(x.sum(dim=-1, keepdim=True))
        return x
