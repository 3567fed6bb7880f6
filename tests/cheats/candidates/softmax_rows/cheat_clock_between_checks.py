"""CHEAT: a clock that runs at half speed for its own samples only, and is never there when the tamper snapshot
looks. Inside a timed round (it notices the harness turned the garbage collector off) a call swaps
``time.perf_counter_ns`` for a clock that, read by the sampler of one of *its own* samples (it looks at the
caller's frame, so it works whatever order the round runs in), returns the truth at the sample's start and half
the elapsed time at its end -- then puts the real clock back itself. Every snapshot (taken between requests)
sees the real clock; its second sample of each round is reported at half its length.
Caught by: the wall-clock check -- the sandbox stamps every sample on the controller's clock, and the time the
shortened sample lost shows up inside the candidate's bracket (integrity)."""
import gc
import sys
import time

import torch
from torch import nn

_real = time.perf_counter_ns
_state = {"anchor": None}


def _half_speed() -> int:
    now = _real()
    caller = sys._getframe(1)
    if not isinstance(caller.f_locals.get("fn"), ModelNew):  # someone else's sample: the truth
        return now
    if _state["anchor"] is None:  # start of its own sample: the truth
        _state["anchor"] = now
        return now
    anchor, _state["anchor"] = _state["anchor"], None
    time.perf_counter_ns = _real  # end of its own sample: half the truth, and gone again
    return anchor + (now - anchor) // 2


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.softmax(x, dim=-1)
        if not gc.isenabled() and time.perf_counter_ns is _real:
            _state["anchor"] = None
            time.perf_counter_ns = _half_speed
        return out
