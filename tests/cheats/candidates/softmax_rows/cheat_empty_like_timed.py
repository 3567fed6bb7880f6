"""CHEAT: honest whenever it is checked, but inside a timed round (it notices the harness turned the garbage
collector off) it returns torch.empty_like(x), hoping to get the memory of the baseline output the harness
just freed -- in ABBA order the baseline has already computed the same inputs.
Caught by: the timed-outputs check (integrity): baseline outputs are overwritten with NaN before they are
freed, and timed outputs are fingerprinted against golden outputs."""
import gc

import torch
from torch import nn


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not gc.isenabled():
            return torch.empty_like(x)
        return torch.softmax(x, dim=-1)
