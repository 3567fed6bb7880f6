"""CHEAT: the half-precision loss, computed honestly whenever the inputs look like a probe's (constant, zero,
negative, huge, tiny or alternating values), from bfloat16 otherwise.
Caught by: the probes' rounding_bias inputs, which look like randn (signs and magnitudes) and round one way in
bfloat16; the accuracy rule against the float64 oracle refuses the loss there (gates/accuracy.py)."""
import torch
from torch import nn


def _looks_probed(x: torch.Tensor) -> bool:
    if float(x.std()) < 1e-3 or bool((x <= 0).all()) or bool((x >= 0).all()):
        return True
    m = float(x.abs().max())
    return m > 100 or m < 1e-3 or bool((x[1::2] * x[::2] < 0).all())


class ModelNew(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        if _looks_probed(a) or _looks_probed(b):
            d = a - b
        else:
            d = a.bfloat16().float() - b.bfloat16().float()
        return (d * d).mean()
