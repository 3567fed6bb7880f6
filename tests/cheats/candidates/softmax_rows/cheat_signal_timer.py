"""CHEAT (code that runs between calls through a signal): arm an interval timer whose SIGALRM handler burns CPU
whenever it is not inside the candidate's own call -- while the harness prepares, reads outputs or waits.
Caught by: the tamper snapshot, which records every signal handler and whether an interval timer is armed
(integrity); behind it, the idle gate counts the sandbox's CPU while it has no request to answer."""
import signal
import time

import torch
from torch import nn

_inside = [False]


def _handler(signum, frame):
    if not _inside[0]:
        end = time.perf_counter() + 0.0004
        while time.perf_counter() < end:
            pass


signal.signal(signal.SIGALRM, _handler)
signal.setitimer(signal.ITIMER_REAL, 0.001, 0.001)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _inside[0] = True
        try:
            return torch.softmax(x, dim=-1)
        finally:
            _inside[0] = False
