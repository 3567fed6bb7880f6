"""CHEAT (contract): return a tuple holding the right tensor plus an arbitrary Python object, which cannot cross
the sandbox boundary. Caught by: the correctness gate, as a rejection -- not a sandbox crash."""
import torch
from torch import nn


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor):
        return (torch.softmax(x, dim=-1), object())
