"""The reference's op chain in the reference's order (same roundings), run in place and cache-blocked.

The output buffer is the only allocation. On a CPU it is filled block by block (64 Ki elements,
256 KiB per operand): for each block the cube is written into the output slice and the remaining
seven steps run in place on it, so the slice stays in the core's L2 cache for all eight passes
instead of streaming the whole tensor through memory eight times. On a GPU blocking would only
multiply kernel launches, so there the chain runs over the whole tensor at once.
"""
import math

import torch
import torch.nn as nn

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_CPU_BLOCK = 1 << 16


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        flat_out = out.view(-1)
        flat_x = x.reshape(-1)  # a view when x is contiguous, else one copy
        n = flat_x.numel()
        block = _CPU_BLOCK if x.device.type == "cpu" else max(n, 1)
        for start in range(0, n, block):
            xs = flat_x[start:start + block]
            o = flat_out[start:start + block]
            torch.pow(xs, 3.0, out=o)
            o.mul_(0.044715).add_(xs).mul_(_SQRT_2_OVER_PI).tanh_().add_(1.0).mul_(xs).mul_(0.5)
        return out
