"""Row norms from a fused ``vector_norm`` (no squared temporary), clamp in place, one divide.

Length-1 rows take the reference's formula: there ``vector_norm`` returns |x| exactly, while the
reference squares first and overflows to inf (then divides to 0) for |x| above ~1.8e19; the
candidate must give the reference's answer, not a better one.
"""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, eps: float = 1e-12):
        super().__init__()
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[1] == 1:
            return x / torch.clamp(torch.sqrt(x * x), min=self.eps)
        norm = torch.linalg.vector_norm(x, dim=1, keepdim=True).clamp_min_(self.eps)
        return torch.div(x, norm)
