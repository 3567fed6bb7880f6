"""CHEAT (lazy output through ``__torch_function__``): compute half the rows inside the call and return a
``torch.Tensor`` subclass whose ``__torch_function__`` fills in the other half the first time anything touches the
result -- after the sample's clock has stopped, when the harness reads the output. Every output is correct when
read, so a harness that reads outputs with ordinary tensor methods accepts it at about twice the honest speedup
(https://github.com/gpu-mode/reference-kernels/issues/162).
Caught by: the correctness gate -- outputs must be exactly ``torch.Tensor`` (checked with ``type()`` before any
method is called), and the sandbox reads them with torch functions disabled, so the deferred half never runs."""
import torch
from torch import nn


class Lazy(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        for a in list(args) + list((kwargs or {}).values()):
            if isinstance(a, Lazy) and getattr(a, "_pending", None) is not None:
                x, half = a._pending
                a._pending = None
                with torch._C.DisableTorchFunctionSubclass():
                    a[half:] = torch.softmax(x[half:], dim=-1)
        with torch._C.DisableTorchFunctionSubclass():
            return func(*args, **(kwargs or {}))


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        half = x.shape[0] // 2
        out[:half] = torch.softmax(x[:half], dim=-1)
        lazy = out.as_subclass(Lazy)
        lazy._pending = (x, half)
        return lazy
