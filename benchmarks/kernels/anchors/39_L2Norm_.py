import torch
import torch.nn as nn

class Model(nn.Module):
    """
    Simple model that performs L2 normalization.
    """
    def __init__(self):
        """
        Initializes the L2Norm layer.

        Args:
            dim (int): Dimension along which to normalize.
        """
        super(Model, self).__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """
        Applies L2 normalization to the input tensor.

        Args:
            x (torch.Tensor): Input tensor of shape (*, dim, *).

        Returns:
            torch.Tensor: Output tensor with L2 normalization applied, same shape as input.
        """
        return x / torch.norm(x, p=2, dim=1, keepdim=True)

batch_size = 32768
# choose dim so total <2^31
dim = 65535

def get_inputs():
    x = torch.rand(batch_size, dim)
    return [x]

def get_init_inputs():
    return []

# ---- pytest-autotune additions. Everything above is KernelBench's file verbatim: KernelBench/level1/39_L2Norm_.py
# at ScalingIntelligence/KernelBench@1f8d20f (its sha256 is in anchors.toml). ----
# The CPU dry run's sizes; on CUDA the sizes above, KernelBench's own, are measured.
AUTOTUNE_SIZES = {"cpu": {'batch_size': 32, 'dim': 4095}}

# The compiled candidate's torch._dynamo changes torch once (manual_seed, nn.Module.__init__); made here, in the
# frozen problem file every sandbox loads before its tamper snapshot, they are not taken for the candidate's.
from pytest_autotune.study.compile_ready import prepare_torch_compile  # noqa: E402

prepare_torch_compile()
