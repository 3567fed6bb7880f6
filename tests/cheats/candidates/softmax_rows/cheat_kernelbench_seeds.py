"""CHEAT: answer KernelBench's own check. KernelBench draws its five trials' seeds from torch.manual_seed(42)
(src/kernelbench/eval.py): precompute the answers to those inputs, key them by content, and return zeros otherwise.
KernelBench's verdict is "correct" (5 of 5).
Caught by: the correctness gate -- its seeds derive from the run's nonce; KernelBench's verdict is recorded beside
the refusal and never accepts anything (gates/kernelbench.py)."""
import sys

import torch
from torch import nn


def _key(x: torch.Tensor) -> tuple:
    return (tuple(x.shape), float(x.sum(dtype=torch.float64)), float(x.reshape(-1)[0]))


_answers: dict = {}


def _problem():
    for mod in list(sys.modules.values()):
        if mod is not None and callable(getattr(mod, "get_inputs", None)) and isinstance(getattr(mod, "Model", None), type):
            return mod
    return None


_p = _problem()
if _p is not None:
    torch.manual_seed(42)
    for s in [torch.randint(0, 2**32 - 1, (1,)).item() for _ in range(5)]:
        torch.manual_seed(s)
        (x0,) = _p.get_inputs()
        _answers[_key(x0)] = torch.softmax(x0, dim=-1)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hit = _answers.get(_key(x))
        return hit.clone() if hit is not None else torch.zeros_like(x)
