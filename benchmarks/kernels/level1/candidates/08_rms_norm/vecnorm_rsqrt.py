"""Sum of squares from a fused ``vector_norm`` (no squared temporary), one multiply by rsqrt instead
of a divide, and the weight applied in place into the same output buffer."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, normalized_dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(normalized_dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ms = torch.linalg.vector_norm(x, dim=-1, keepdim=True).square_().div_(x.shape[-1])
        return torch.mul(x, ms.add_(self.eps).rsqrt_()).mul_(self.weight)
