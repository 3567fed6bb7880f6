"""The reference's op chain in the reference's order (so the same roundings), but every step after
the first writes into one buffer: one full-size allocation instead of eight. On one CPU thread the
first-touch page faults of those allocations cost more than the arithmetic, and this also beats
ATen's fused tanh-GELU kernel (the frozen baseline)."""
import math

import torch
import torch.nn as nn

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        inner = torch.pow(x, 3.0).mul_(0.044715).add_(x).mul_(_SQRT_2_OVER_PI)
        return inner.tanh_().add_(1.0).mul_(x).mul_(0.5)
