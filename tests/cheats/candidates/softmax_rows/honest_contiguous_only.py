"""HONEST (beyond its contract): reads its input's storage as if it were contiguous, as a CUDA kernel that indexes
data_ptr() does. softmax_rows declares no layouts, so KernelBench's get_inputs() (contiguous) is its contract: the
candidate is accepted, and its wrong answers on transposed, strided and offset inputs are findings on the item
(problems/contract.py). Under --autotune-strict-contract they refuse it (tests/test_contract_e2e.py)."""
import torch
from torch import nn


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = torch.as_strided(x, x.shape, (x.shape[1], 1), x.storage_offset())
        return torch.softmax(flat, dim=-1)
