"""ReLU on inputs that are non-negative on the paired seeds' inputs.

A weak problem on purpose: on get_inputs() the op is the identity, so a candidate that returns its input
passes the paired-seed correctness check. The probes (negative inputs) and the breaker are what stop it.
"""
import torch
from torch import nn

rows = 128
cols = 2048

AUTOTUNE_SIZES = {"cpu": {"rows": 128, "cols": 2048}, "cuda": {"rows": 8192, "cols": 8192}}
AUTOTUNE_SHAPE_RANGES = {"rows": (1, 64), "cols": (1, 512)}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


def get_inputs():
    return [torch.rand(rows, cols)]


def get_init_inputs():
    return []
