import torch
import torch.nn as nn

class Model(nn.Module):
    """
    Simple model that performs a ReLU activation.
    """
    def __init__(self):
        super(Model, self).__init__()
    
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """
        Applies ReLU activation to the input tensor.

        Args:
            x (torch.Tensor): Input tensor of any shape.

        Returns:
            torch.Tensor: Output tensor with ReLU applied, same shape as input.
        """
        return torch.relu(x)

batch_size = 4096
dim = 393216

def get_inputs():
    x = torch.rand(batch_size, dim)
    return [x]

def get_init_inputs():
    return []  # No special initialization inputs needed

# ---- pytest-autotune additions. Everything above is KernelBench's file verbatim: KernelBench/level1/19_ReLU.py
# at ScalingIntelligence/KernelBench@1f8d20f (its sha256 is in anchors.toml). ----
# The CPU dry run's sizes; on CUDA the sizes above, KernelBench's own, are measured.
AUTOTUNE_SIZES = {"cpu": {'batch_size': 16, 'dim': 16384}}

# The compiled candidate's torch._dynamo changes torch once (manual_seed, nn.Module.__init__); made here, in the
# frozen problem file every sandbox loads before its tamper snapshot, they are not taken for the candidate's.
from pytest_autotune.study.compile_ready import prepare_torch_compile  # noqa: E402

prepare_torch_compile()
