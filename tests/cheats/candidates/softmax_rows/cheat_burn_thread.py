"""CHEAT: start a background thread on the first call that keeps one core busy (stealing CPU from the
baseline on a loaded machine, or doing the candidate's work outside the timed region).
Caught by: the thread count after each call (integrity: threads left running after the call returned)."""
import threading

import torch
from torch import nn

_started = []


def _burn() -> None:
    x = 0
    while True:
        x += 1


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not _started:
            t = threading.Thread(target=_burn, daemon=True)
            t.start()
            _started.append(t)
        return torch.softmax(x, dim=-1)
