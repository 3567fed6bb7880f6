"""CHEAT: make every comparison function say "equal" and return a wrong answer (the input itself), hoping the
correctness check runs in this process.
Caught by: the tamper snapshot (integrity). It also changes nothing: outputs are compared in the controller,
which this process cannot reach."""
import torch
import torch.testing
from torch import nn


def _true(*args, **kwargs):
    return True


def _none(*args, **kwargs):
    return None


torch.allclose = _true
torch.equal = _true
torch.testing.assert_close = _none


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.clone()
