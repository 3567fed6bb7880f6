"""Searchable softmax (last dimension): ``autotune search --problem=benchmarks/kernels/level1/05_softmax.py``.

Dimensions (docs/guide/studies.md#seeded-search-baselines-autotune-search):

* ``algorithm`` -- ``library``: ``torch.softmax``; ``two_pass``: row max, then ``exp`` of the shifted rows in one
  output buffer, its row sum, an in-place divide; ``logsumexp``: ``exp(x - logsumexp(x))``; ``textbook``: the
  reference's five passes (a deliberately weak point of the space);
* ``block_rows`` -- 0: the whole tensor at once; otherwise blocks of that many rows written into one preallocated
  output, so a block's rows stay in cache across the passes;
* ``inplace_divide`` -- normalise with ``div_`` in the output buffer, or allocate the quotient.

No point lowers precision or writes its input. ``logsumexp`` is the space's numerically weak point: where the
row's magnitude is so large that float32 cannot hold ``lse - x`` (rows of a constant 1e12: ``lse`` rounds back to
1e12), it returns 1 instead of 1/n; the probes' constant inputs catch it, and a search that draws it records an
unusable iteration (measured 2026-12-01: 1 of the 6 logsumexp points refused by a probe in a correctness run of
all 24 points; the other 23 points passed).
"""
import torch
import torch.nn as nn

AUTOTUNE_SEARCH_SPACE = {
    "algorithm": ["library", "two_pass", "logsumexp", "textbook"],
    "block_rows": [0, 16, 64],
    "inplace_divide": [True, False],
}
PARAMS = {"algorithm": "two_pass", "block_rows": 0, "inplace_divide": True}


def _softmax(x: torch.Tensor, algorithm: str, inplace: bool) -> torch.Tensor:
    if algorithm == "library":
        return torch.softmax(x, dim=-1)
    if algorithm == "logsumexp":
        return torch.exp(x - torch.logsumexp(x, dim=-1, keepdim=True))
    if algorithm == "textbook":
        row_max = torch.max(x, dim=-1, keepdim=True).values
        e = torch.exp(x - row_max)
        return e / torch.sum(e, dim=-1, keepdim=True)
    row_max = torch.max(x, dim=-1, keepdim=True).values
    e = torch.sub(x, row_max).exp_()
    total = e.sum(dim=-1, keepdim=True)
    return e.div_(total) if inplace else e / total


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.algorithm = PARAMS["algorithm"]
        self.block_rows = PARAMS["block_rows"]
        self.inplace = PARAMS["inplace_divide"]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, x.shape[-1]) if x.dim() > 0 else x.reshape(1, 1)
        if self.block_rows <= 0 or rows.shape[0] <= self.block_rows:
            return _softmax(x, self.algorithm, self.inplace)
        out = torch.empty_like(rows)
        for start in range(0, rows.shape[0], self.block_rows):
            block = rows[start:start + self.block_rows]
            out[start:start + self.block_rows] = _softmax(block, self.algorithm, self.inplace)
        return out.reshape(x.shape)
