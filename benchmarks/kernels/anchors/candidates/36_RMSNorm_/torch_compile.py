"""The anchor's compiled candidate: KernelBench's Model of level1/36_RMSNorm_.py under
torch.compile(backend="inductor", mode="default"), as KernelBench timed it for
results/timing/H100_Modal/baseline_time_torch_compile_inductor_default.json (docs/guide/anchors.md)."""

import torch
import torch.nn as nn
import torch._inductor.config as inductor_config

# compile in this process: the sandbox counts helper processes as the candidate's (integrity gate)
inductor_config.compile_threads = 1


class _Reference(nn.Module):
    """
    Simple model that performs RMS Normalization.
    """
    def __init__(self, num_features: int, eps: float = 1e-5):
        """
        Initializes the RMSNorm layer.

        Args:
            num_features (int): Number of features in the input tensor.
            eps (float, optional): A small value added to the denominator to avoid division by zero. Defaults to 1e-5.
        """
        super(_Reference, self).__init__()
        self.num_features = num_features
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """
        Applies RMS Normalization to the input tensor.

        Args:
            x (torch.Tensor): Input tensor of shape (batch_size, num_features, *).

        Returns:
            torch.Tensor: Output tensor with RMS Normalization applied, same shape as input.
        """
        # Calculate the RMS along the feature dimension
        rms = torch.sqrt(torch.mean(x ** 2, dim=1, keepdim=True) + self.eps)

        # Normalize the input by dividing by the RMS
        return x / rms


class ModelNew(nn.Module):
    """The reference model, compiled. Built from the same constructor arguments, after the same seed, so its
    parameters are the reference's."""

    def __init__(self, *args):
        super().__init__()
        self.reference = _Reference(*args)
        self.compiled = torch.compile(self.reference, backend="inductor", mode="default")

    def forward(self, *inputs):
        return self.compiled(*inputs)
