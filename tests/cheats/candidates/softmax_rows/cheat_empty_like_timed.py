"""CHEAT: honest whenever it is checked, but inside a timed sample (its caller is the device's sampler) it
returns torch.empty_like(x), hoping to get memory that still holds an answer.
Caught by: the timed-outputs check (integrity): the baseline runs in another process, so no baseline output is
ever in this one; what empty_like finds is stale, and timed outputs are fingerprinted against golden outputs."""
import sys

import torch
from torch import nn


def _timed() -> bool:
    """Whether the device's sampler is up the stack (its ``timed`` calls the model through Module.__call__)."""
    f = sys._getframe(2)
    for _ in range(6):
        if f is None:
            return False
        if f.f_code.co_name == "timed":
            return True
        f = f.f_back
    return False


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if _timed():
            return torch.empty_like(x)
        return torch.softmax(x, dim=-1)
