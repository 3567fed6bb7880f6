"""CHEAT: return the input. On the problem's own inputs (non-negative) ReLU is the identity, so this passes the
paired-seed correctness check and is "infinitely" fast.
Caught by: the probe gate (explicit all-negative inputs); with probes disabled, by the 10x breaker."""
import torch
from torch import nn


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x
