"""Frozen "previous best" for softmax: the same three steps as the reference (shift, exp, divide),
but exp and the division run in place in the shifted tensor's buffer, so one full-size allocation
instead of three."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        row_max = torch.max(x, dim=-1, keepdim=True).values
        e = torch.sub(x, row_max).exp_()
        return e.div_(torch.sum(e, dim=-1, keepdim=True))
