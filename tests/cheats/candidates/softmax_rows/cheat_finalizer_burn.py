"""CHEAT (a finalizer that burns CPU when the harness frees its output): every output carries a
``weakref.finalize`` that spins for 3 ms. In a harness that times both arms in one process and frees the
candidate's outputs while the baseline is timed, that is the baseline's time.
Gains nothing: the outputs are freed in the candidate's own sandbox, where the baseline never runs, between
rounds, while nothing is timed (the release step of sandbox/child.py, whose CPU is reported but not compared)."""
import time
import weakref

import torch
from torch import nn


def _burn() -> None:
    end = time.perf_counter() + 0.003
    while time.perf_counter() < end:
        pass


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.softmax(x, dim=-1)
        weakref.finalize(out, _burn)
        return out
