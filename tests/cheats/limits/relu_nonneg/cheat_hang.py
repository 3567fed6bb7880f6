"""HANG: on the first call, ignore SIGTERM and sleep forever.
Expected: killed at [sandbox].timeout_s (SIGKILL to its process group); a pytest *error* for this item only.
(Ignoring SIGTERM at import would be refused first: signal handlers are in the tamper snapshot.)"""
import signal
import time

import torch
from torch import nn


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        while True:
            time.sleep(3600)
