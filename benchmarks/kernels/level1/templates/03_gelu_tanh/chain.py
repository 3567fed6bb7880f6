"""Searchable tanh-GELU: ``autotune search --problem=benchmarks/kernels/level1/03_gelu_tanh.py``.

Dimensions (docs/guide/studies.md#seeded-search-baselines-autotune-search):

* ``algorithm`` -- ``library``: ``F.gelu(approximate="tanh")`` per block; ``chain``: the reference's eight steps in
  the reference's order, in place in the output buffer (same roundings);
* ``block_elems`` -- 0: the whole tensor at once; otherwise the flattened tensor in blocks of that many elements,
  so a block stays in the core's cache for all the steps (the block size is the classic tuning knob here);
* ``cube`` -- ``pow``: ``x ** 3`` as the reference computes it; ``mul``: ``x * x * x`` (rounds differently, within
  the float32 tolerance).

The input is never written; the output buffer is the only full-size allocation (the library path allocates one
temporary per block).
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

AUTOTUNE_SEARCH_SPACE = {
    "algorithm": ["library", "chain"],
    "block_elems": [0, 4096, 16384, 65536, 262144],
    "cube": ["pow", "mul"],
}
PARAMS = {"algorithm": "chain", "block_elems": 65536, "cube": "pow"}

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.algorithm = PARAMS["algorithm"]
        self.block = PARAMS["block_elems"]
        self.cube = PARAMS["cube"]

    def _block(self, xs: torch.Tensor, o: torch.Tensor) -> None:
        if self.algorithm == "library":
            o.copy_(F.gelu(xs, approximate="tanh"))
            return
        if self.cube == "pow":
            torch.pow(xs, 3.0, out=o)
        else:
            torch.mul(xs, xs, out=o).mul_(xs)
        o.mul_(0.044715).add_(xs).mul_(_SQRT_2_OVER_PI).tanh_().add_(1.0).mul_(xs).mul_(0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        flat_out = out.view(-1)
        flat_x = x.reshape(-1)
        n = flat_x.numel()
        block = self.block if self.block > 0 else max(n, 1)
        for start in range(0, n, block):
            self._block(flat_x[start:start + block], flat_out[start:start + block])
        return out
