"""The anchor's compiled candidate: KernelBench's Model of level1/39_L2Norm_.py under
torch.compile(backend="inductor", mode="default"), as KernelBench timed it for
results/timing/H100_Modal/baseline_time_torch_compile_inductor_default.json (docs/guide/anchors.md)."""

import torch
import torch.nn as nn
import torch._inductor.config as inductor_config

# compile in this process: the sandbox counts helper processes as the candidate's (integrity gate)
inductor_config.compile_threads = 1


class _Reference(nn.Module):
    """
    Simple model that performs L2 normalization.
    """
    def __init__(self):
        """
        Initializes the L2Norm layer.

        Args:
            dim (int): Dimension along which to normalize.
        """
        super(_Reference, self).__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """
        Applies L2 normalization to the input tensor.

        Args:
            x (torch.Tensor): Input tensor of shape (*, dim, *).

        Returns:
            torch.Tensor: Output tensor with L2 normalization applied, same shape as input.
        """
        return x / torch.norm(x, p=2, dim=1, keepdim=True)


class ModelNew(nn.Module):
    """The reference model, compiled. Built from the same constructor arguments, after the same seed, so its
    parameters are the reference's."""

    def __init__(self, *args):
        super().__init__()
        self.reference = _Reference(*args)
        self.compiled = torch.compile(self.reference, backend="inductor", mode="default")

    def forward(self, *inputs):
        return self.compiled(*inputs)
