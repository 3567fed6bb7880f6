"""A/A yardstick, long call: ReLU over 64 Mi float32 (256 MiB in, 256 MiB out: about 130 us on an H200).

Not a benchmark problem of the suite: benchmarks/harness/gpu/run_h200.sh collects it with ``--problems`` and
``--autotune-aa`` to read the harness's A/A bias on a call long enough to be timed eagerly, and
times the same call naively (back to back, no pairing, no flush) to compare.
"""
import torch
import torch.nn as nn

n = 1 << 16

AUTOTUNE_SIZES = {
    "cpu": {"n": 1 << 16},
    "cuda": {"n": 1 << 26},
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
