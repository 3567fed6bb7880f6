"""Searchable LayerNorm (last dimension, affine): ``autotune search --problem=benchmarks/kernels/level1/07_layer_norm.py``.

Dimensions (docs/guide/studies.md#seeded-search-baselines-autotune-search):

* ``variance`` -- how the biased variance of the centred rows is computed: ``square_mean`` (the reference's
  ``(xc ** 2).mean``), ``vector_norm`` (a fused sum of squares, no squared temporary), ``dot`` (``xc * xc``
  summed in place);
* ``normalize`` -- ``rsqrt`` then multiply, or divide by ``sqrt``;
* ``affine`` -- ``addcmul`` of weight and bias written back into the centred buffer, or separate ``* w + b``.

The mean is always the reference's own ``x.mean`` (near-constant rows amplify its rounding by 1/sqrt(eps), so a
differently rounded mean fails there), and the input is never written.
"""
import torch
import torch.nn as nn

AUTOTUNE_SEARCH_SPACE = {
    "variance": ["square_mean", "vector_norm", "dot"],
    "normalize": ["rsqrt", "div_sqrt"],
    "affine": ["addcmul_inplace", "separate"],
}
PARAMS = {"variance": "vector_norm", "normalize": "rsqrt", "affine": "addcmul_inplace"}


class ModelNew(nn.Module):
    def __init__(self, normalized_dim: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(normalized_dim))
        self.bias = nn.Parameter(torch.zeros(normalized_dim))
        self.variance = PARAMS["variance"]
        self.normalize = PARAMS["normalize"]
        self.affine = PARAMS["affine"]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean = x.mean(dim=-1, keepdim=True)
        xc = x - mean
        n = x.shape[-1]
        if self.variance == "square_mean":
            var = (xc ** 2).mean(dim=-1, keepdim=True)
        elif self.variance == "vector_norm":
            var = torch.linalg.vector_norm(xc, dim=-1, keepdim=True).square_().div_(n)
        else:
            var = (xc * xc).sum(dim=-1, keepdim=True).div_(n)
        if self.normalize == "rsqrt":
            xc.mul_(var.add_(self.eps).rsqrt_())
        else:
            xc.div_(torch.sqrt(var + self.eps))
        if self.affine == "addcmul_inplace":
            return torch.addcmul(self.bias, xc, self.weight, out=xc)
        return xc * self.weight + self.bias
