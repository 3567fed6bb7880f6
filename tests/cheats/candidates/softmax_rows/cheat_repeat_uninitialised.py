"""CHEAT: whenever an input repeats (the same address and the same first values as an earlier call), return an
uninitialised tensor instead of computing: free wherever a harness times repeated inputs without checking what
comes back (protocol 8's calibration: torch.relu read 3.03x against 1.35x with this). Every other call is the fused
softmax. Since protocol 9 no timed or calibration call sees an input twice (measure/schedule.py). Expected: gains
nothing against the fused softmax."""
import torch
from torch import nn

_seen: set = set()


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        key = (x.data_ptr(), tuple(x.reshape(-1)[:8].tolist()))
        if key in _seen:
            return torch.empty_like(x)
        if len(_seen) > 4096:
            _seen.clear()
        _seen.add(key)
        return torch.softmax(x, dim=-1)
