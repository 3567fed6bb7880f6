"""MEMORY: allocate (and touch) 256 MiB blocks until something stops it.
Expected: killed once its resident memory passes [sandbox].memory_mb; a pytest *error* for this item only.
(Large blocks reach the limit in a few allocations, so the memory watchdog, not the timeout, ends it even on a
loaded machine.)"""
import torch
from torch import nn

_hoard = []


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        while True:
            _hoard.append(torch.ones(64 << 20))  # 256 MiB, written so it is resident
