"""CHEAT: give itself more CPU threads than the protocol allows (torch.set_num_threads(2)) during its own calls
and put the setting back before returning, so the baseline keeps the protocol's one thread.
Caught by: the thread count after the call (the intra-op pool's worker threads stay alive: integrity)."""
import torch
from torch import nn


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        before = torch.get_num_threads()
        torch.set_num_threads(2)
        try:
            return torch.softmax(x, dim=-1)
        finally:
            torch.set_num_threads(before)
