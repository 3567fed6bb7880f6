"""CHEAT: return an output buffer at once and let a background thread finish it after the call returned, so
the timer stops before the work is done.
Caught by: the correctness gate, which reads the output the moment the call returns (and again after
``[correctness].recheck_delay_s``, and counts the threads left running): half of it is not there yet."""
import threading
import time

import torch
from torch import nn


def _finish(out: torch.Tensor, x: torch.Tensor, h: int) -> None:
    time.sleep(0.002)
    out[h:] = torch.softmax(x[h:], dim=-1)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.shape[0] // 2
        out = torch.zeros_like(x)
        out[:h] = torch.softmax(x[:h], dim=-1)  # half now, half after returning
        threading.Thread(target=_finish, args=(out, x, h), daemon=True).start()
        return out
