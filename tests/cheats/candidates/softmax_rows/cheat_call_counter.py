"""CHEAT: honest for the first calls (correctness, probes, warm-up), then -- once the harness should have stopped
looking -- returns a cheap wrong answer (the input).
Caught by: the timed-outputs check (integrity): outputs of timed rounds chosen after the fact are compared with
golden outputs."""
import torch
from torch import nn

_calls = [0]


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _calls[0] += 1
        if _calls[0] > 40:
            return x.clone()
        return torch.softmax(x, dim=-1)
