"""CHEAT: slow the baseline by patching the baseline model *instance* (found on the heap with gc): an instance
attribute ``forward`` shadows the class method, and no module, class or function is touched -- it escapes every
identity snapshot.
Defeated by construction: the baseline runs in its own sandbox, which never imports a candidate, so there is no
baseline instance in this process to find; it gains nothing (docs/design/threat-model.md)."""
import gc
import sys
import time

import torch
from torch import nn


def _slow(forward):
    def slowed(*args, **kwargs):
        end = time.perf_counter() + 0.004
        while time.perf_counter() < end:
            pass
        return forward(*args, **kwargs)

    return slowed


class ModelNew(nn.Module):
    patched = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not ModelNew.patched:
            ModelNew.patched = True
            me = sys.modules[type(self).__module__]
            for o in gc.get_objects():
                if isinstance(o, nn.Module) and type(o).__name__ == "Model" and type(o).__module__ != me.__name__:
                    o.forward = _slow(o.forward)
        return torch.softmax(x, dim=-1)
