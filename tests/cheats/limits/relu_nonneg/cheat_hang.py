"""HANG: sleep forever on the first call, with SIGTERM ignored.
Expected: killed at [sandbox].timeout_s; a pytest *error* for this item only."""
import signal
import time

import torch
from torch import nn

signal.signal(signal.SIGTERM, signal.SIG_IGN)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        while True:
            time.sleep(3600)
