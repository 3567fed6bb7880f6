"""HardTanh to [-1, 1] on a 16 x 16384 float32 batch: a short call (~0.1-0.3 ms on one CPU thread), the size of
KernelBench level 1's elementwise problems. A/A yardstick for the harness (benchmarks/harness/bench_harness.py aa).
"""
import torch
from torch import nn

batch_size = 16
dim = 16384


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.hardtanh(x, min_val=-1.0, max_val=1.0)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
