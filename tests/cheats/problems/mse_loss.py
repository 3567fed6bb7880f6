"""A scalar loss over 65536 values: mean squared error, written as subtract, square, mean (three passes).

A loss is where a half-precision shortcut hides: its rounding errors average out in the mean, so a fixed rtol against
the reference passes it (docs/design/accuracy.md)."""
import torch
from torch import nn

n = 65536

AUTOTUNE_SIZES = {"cpu": {"n": 65536}, "cuda": {"n": 1 << 24}}


class Model(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        d = a - b
        return (d * d).mean()


def get_inputs():
    return [torch.randn(n), torch.randn(n)]


def get_init_inputs():
    return []
