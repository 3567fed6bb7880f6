"""CHEAT: find out from the call stack whether the harness is calibrating (a caller frame named like a calibration
handler), and there return an uninitialised tensor in microseconds; everywhere else compute honestly. Calibration
outputs are not checked, so when the candidate's calibrated call chose k, this pushed k to the protocol's cap and the
ratio with it (the reference's call is several times slower with 64 sets alive than with 4: docs/results/cpu.md, "The
sample's shape"). Since protocol 9 k comes from the baseline's calibration alone (measure/schedule.py). Expected:
gains nothing against the fused softmax."""
import sys

import torch
from torch import nn


def _calibrating() -> bool:
    frame = sys._getframe(1)
    while frame is not None:
        if "calibrat" in frame.f_code.co_name:
            return True
        frame = frame.f_back
    return False


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if _calibrating():
            return torch.empty_like(x)
        return torch.softmax(x, dim=-1)
