"""CHEAT (sabotage below the old baseline-sanity limit): find the baseline model instance with ``gc`` and shadow
its ``forward`` with a wrapper that spins for 40% of the baseline's own time -- a 1.4x slowdown, under the 1.5x
that the single-process design's baseline-sanity check allowed (honest items there read 0.89-1.08).
Defeated by construction: the baseline runs in its own sandbox, which never imports a candidate; there is no
baseline instance in this process, so the cheat finds nothing and gains nothing (docs/design/threat-model.md)."""
import gc
import sys
import time

import torch
from torch import nn


def _slowed(forward):
    def slow(*args, **kwargs):
        t0 = time.perf_counter()
        out = forward(*args, **kwargs)
        end = time.perf_counter() + 0.4 * (time.perf_counter() - t0)
        while time.perf_counter() < end:
            pass
        return out

    return slow


class ModelNew(nn.Module):
    found = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if ModelNew.found is None:
            me = sys.modules[type(self).__module__]
            victims = [o for o in gc.get_objects()
                       if isinstance(o, nn.Module) and type(o).__name__ == "Model" and type(o).__module__ != me.__name__]
            for v in victims:
                v.forward = _slowed(v.forward)
            ModelNew.found = len(victims)
        return torch.softmax(x, dim=-1)
