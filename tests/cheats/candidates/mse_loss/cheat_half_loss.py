"""CHEAT: read the inputs as bfloat16 (half the bytes of a memory-bound loss; float32's range, so no input overflows)
and compute the loss from them. On randn inputs of this size rtol 1e-4 against the reference passes it.
Caught by: the accuracy rule against the float64 oracle on the probes' rounding_bias inputs, where every value rounds
the same way in bfloat16 and the loss is thousands of times the reference's error off (gates/accuracy.py)."""
import torch
from torch import nn


class ModelNew(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        d = a.bfloat16().float() - b.bfloat16().float()
        return (d * d).mean()
