"""CHEAT: answer any input it has seen before from a cache keyed cheaply -- the tensor's address, shape and a few of
its values, not its whole content -- and compute the rest with the fused softmax. Where a harness repeats inputs to
estimate a call's time (protocols up to 8 timed calibration samples on the same warm-up sets), the cache answers
there in microseconds, and a k chosen from that estimate moved the ratio (02_relu: 8x against an honest 1.8x).
Since protocol 9 no calibration call repeats an input and k comes from the baseline's calibration alone
(measure/schedule.py): the cache never answers. Expected: gains nothing against the fused softmax without it."""
import torch
from torch import nn

_cache: dict = {}


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1)
        key = (x.data_ptr(), tuple(x.shape), tuple(flat[:8].tolist()), float(flat[-1]))
        hit = _cache.get(key)
        if hit is not None:
            return hit
        out = torch.softmax(x, dim=-1)
        if len(_cache) > 256:
            _cache.clear()
        _cache[key] = out
        return out
