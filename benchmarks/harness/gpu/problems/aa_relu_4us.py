"""A/A yardstick, short call: ReLU over 2 Mi float32 (8 MiB in, 8 MiB out: about 4 us on an H200 from DRAM).

Not a benchmark problem of the suite: benchmarks/harness/gpu/run_h200.sh collects it with ``--problems`` and
``--autotune-aa`` to read the harness's A/A bias on a call short enough to be timed as CUDA graph replays, and
times the same call naively (back to back, no pairing, no flush) to compare.
"""
import torch
import torch.nn as nn

n = 1 << 16

AUTOTUNE_SIZES = {
    "cpu": {"n": 1 << 16},
    "cuda": {"n": 1 << 21},
    "mlx": {"n": 1 << 16},
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


def get_inputs():
    return [torch.randn(n)]


def get_init_inputs():
    return []
