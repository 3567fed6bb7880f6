"""Frozen "previous best" for LayerNorm: centre once, take the variance of the centred tensor,
multiply by rsqrt and apply the affine parameters in place."""
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
        var = (xc * xc).mean(dim=-1, keepdim=True)
        return xc.mul_(torch.rsqrt(var + self.eps)).mul_(self.weight).add_(self.bias)
