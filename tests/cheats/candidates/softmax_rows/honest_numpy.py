"""HONEST (tricky): imports numpy and computes with it (on a copy), returning a fresh float32 torch tensor."""
import numpy as np
import torch
from torch import nn


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = x.numpy()  # a view; only read below
        e = np.exp(a - a.max(axis=-1, keepdims=True))
        e /= e.sum(axis=-1, keepdims=True, dtype=np.float64).astype(np.float32)
        return torch.from_numpy(e)
