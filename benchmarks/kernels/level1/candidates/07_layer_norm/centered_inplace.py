"""Hand-written LayerNorm with the reference's statistics, but one full-size buffer instead of six.

The mean is the reference's own ``x.mean`` (so the centring rounds identically, which matters for
near-constant rows, where the output is that rounding amplified by 1/sqrt(eps)); the centred tensor
is computed once; the sum of squares comes from a fused ``vector_norm`` (no squared temporary, and it
overflows to inf exactly where the reference's squares do); then scale by rsqrt in place and apply
weight and bias with one ``addcmul`` written back into the same buffer.
"""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, normalized_dim: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(normalized_dim))
        self.bias = nn.Parameter(torch.zeros(normalized_dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean = x.mean(dim=-1, keepdim=True)
        xc = x - mean
        ss = torch.linalg.vector_norm(xc, dim=-1, keepdim=True).square_()
        rstd = ss.div_(x.shape[-1]).add_(self.eps).rsqrt_()
        return torch.addcmul(self.bias, xc.mul_(rstd), self.weight, out=xc)
