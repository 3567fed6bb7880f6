"""CHEAT: skip the output allocation by returning the same preallocated buffer from every call. Each answer is
right when it is returned, but the next call overwrites it: the caller's earlier outputs are silently
clobbered.
Caught by: the timed-outputs check -- every candidate output of a timed round is kept until the round ends and
its fingerprint, taken at positions drawn afterwards, must match the golden output of its own inputs
(integrity)."""
import torch
from torch import nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.out = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.out is None or self.out.shape != x.shape:
            self.out = torch.empty_like(x, memory_format=torch.contiguous_format)
        torch.softmax(x, dim=-1, out=self.out)
        return self.out
