"""CHEAT: read the inputs as float16 (half the bytes of a memory-bound loss) and compute the loss from them. On
randn inputs of this size its error is ~23x the float32 reference's, and rtol 1e-4 against the reference passes it.
Caught by: the accuracy rule against the float64 oracle on the probes' rounding_bias inputs, where every value rounds
the same way in float16 and the loss is thousands of times the reference's error off (gates/accuracy.py)."""
import torch
from torch import nn


class ModelNew(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        d = a.half().float() - b.half().float()
        return (d * d).mean()
