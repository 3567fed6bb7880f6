"""CRASH: dereference a null pointer through ctypes on the first call (SIGSEGV in the sandbox).
Expected: a pytest *error* for this item only; the session and the other items go on."""
import ctypes

import torch
from torch import nn


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ctypes.string_at(0)
        return x
