"""CHEAT: precompute the answers for predictable seeds. At import, build the inputs the problem's get_inputs()
gives for torch.manual_seed(s), s = 0..63 (and the common 42, 1234, ...), and key the answers by a content
checksum; at call time return the stored answer, or zeros when the seed was not predicted.
Caught by: the correctness gate -- every seed derives from a per-run 256-bit nonce (HMAC), so none is ever hit."""
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
    for s in [*range(64), 42, 1234, 12345, 2024, 2025, 31337]:
        torch.manual_seed(s)
        (x0,) = _p.get_inputs()
        _answers[_key(x0)] = torch.softmax(x0, dim=-1)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hit = _answers.get(_key(x))
        return hit.clone() if hit is not None else torch.zeros_like(x)
