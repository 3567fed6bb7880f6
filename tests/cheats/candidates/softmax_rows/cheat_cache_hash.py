"""CHEAT: memoise answers keyed on a content checksum of the input (exact float64 sum plus sampled values).
Every timed call gets inputs built from a fresh seed, so the cache never hits: it only costs the checksum.
Expected: gains nothing (accepted no faster than the honest fused softmax), or refused."""
import torch
from torch import nn

_cache: dict = {}


def _key(x: torch.Tensor) -> tuple:
    flat = x.reshape(-1)
    n = flat.numel()
    picks = flat[:: max(1, n // 16)][:16].tolist() if n else []
    return (tuple(x.shape), float(x.sum(dtype=torch.float64)), tuple(picks))


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        k = _key(x)
        hit = _cache.get(k)
        if hit is not None:
            return hit.clone()
        out = torch.softmax(x, dim=-1)
        if len(_cache) < 4096:
            _cache[k] = out
        return out
