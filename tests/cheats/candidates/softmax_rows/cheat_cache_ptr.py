"""CHEAT: cache answers keyed on the input's address (data_ptr, shape, stride). Inputs built for one call are
freed and the next call's inputs often land at the same address, so the cache "hits" on different data.
Caught by: the correctness gate (stale answers on fresh seeds) or the timed-outputs check; inputs are never
reused by the schedule, so even a correct cache could gain nothing."""
import torch
from torch import nn

_cache: dict = {}


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        key = (x.data_ptr(), tuple(x.shape), tuple(x.stride()))
        hit = _cache.get(key)
        if hit is not None:
            return hit
        out = torch.softmax(x, dim=-1)
        _cache[key] = out
        return out
