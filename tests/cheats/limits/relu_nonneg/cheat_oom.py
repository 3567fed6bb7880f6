"""MEMORY: allocate (and touch) 64 MiB blocks until something stops it.
Expected: killed once its resident memory passes [sandbox].memory_mb; a pytest *error* for this item only."""
import torch
from torch import nn

_hoard = []


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        while True:
            _hoard.append(torch.ones(16 << 20))  # 64 MiB, written so it is resident
