"""Row softmax written out naively: max, subtract, exp, sum, divide (five passes, four temporaries).

The honest fused ``torch.softmax`` is about 2x faster on one CPU thread, which gives "gains nothing" cheats
something to compare with.
"""
import torch
from torch import nn

rows = 128
cols = 2048

AUTOTUNE_SIZES = {"cpu": {"rows": 128, "cols": 2048}, "cuda": {"rows": 4096, "cols": 8192}}
AUTOTUNE_SHAPE_RANGES = {"rows": (1, 64), "cols": (1, 512)}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        e = torch.exp(x - x.max(dim=-1, keepdim=True).values)
        return e / e.sum(dim=-1, keepdim=True)


def get_inputs():
    return [torch.randn(rows, cols)]


def get_init_inputs():
    return []
