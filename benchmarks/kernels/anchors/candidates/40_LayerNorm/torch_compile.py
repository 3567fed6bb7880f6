"""The anchor's compiled candidate: KernelBench's Model of level1/40_LayerNorm.py under
torch.compile(backend="inductor", mode="default"), as KernelBench timed it for
results/timing/H100_Modal/baseline_time_torch_compile_inductor_default.json (docs/guide/anchors.md)."""

import torch
import torch.nn as nn
import torch._inductor.config as inductor_config

# compile in this process: the sandbox counts helper processes as the candidate's (integrity gate)
inductor_config.compile_threads = 1


class _Reference(nn.Module):
    """
    Simple model that performs Layer Normalization.
    """
    def __init__(self, normalized_shape: tuple):
        """
        Initializes the LayerNorm layer.

        Args:
            normalized_shape (tuple): Shape of the input tensor to be normalized.
        """
        super(_Reference, self).__init__()
        self.ln = nn.LayerNorm(normalized_shape=normalized_shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """
        Applies Layer Normalization to the input tensor.

        Args:
            x (torch.Tensor): Input tensor of shape (*, normalized_shape).

        Returns:
            torch.Tensor: Output tensor with Layer Normalization applied, same shape as input.
        """
        return self.ln(x)


class ModelNew(nn.Module):
    """The reference model, compiled. Built from the same constructor arguments, after the same seed, so its
    parameters are the reference's."""

    def __init__(self, *args):
        super().__init__()
        self.reference = _Reference(*args)
        self.compiled = torch.compile(self.reference, backend="inductor", mode="default")

    def forward(self, *inputs):
        return self.compiled(*inputs)
