"""The anchor's compiled candidate: KernelBench's Model of level1/88_MinGPTNewGelu.py under
torch.compile(backend="inductor", mode="default"), as KernelBench timed it for
results/timing/H100_Modal/baseline_time_torch_compile_inductor_default.json (docs/guide/anchors.md)."""

import torch
import torch.nn as nn
import torch.nn.functional as F
import math
import torch._inductor.config as inductor_config

# compile in this process: the sandbox counts helper processes as the candidate's (integrity gate)
inductor_config.compile_threads = 1


class _Reference(nn.Module):
    """
    Implementation of the GELU activation function currently in Google BERT repo (identical to OpenAI GPT).
    Reference: Gaussian Error Linear Units (GELU) paper: https://arxiv.org/abs/1606.08415
    """
    def __init__(self):
        super(_Reference, self).__init__()
    
    def forward(self, x):
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class ModelNew(nn.Module):
    """The reference model, compiled. Built from the same constructor arguments, after the same seed, so its
    parameters are the reference's."""

    def __init__(self, *args):
        super().__init__()
        self.reference = _Reference(*args)
        self.compiled = torch.compile(self.reference, backend="inductor", mode="default")

    def forward(self, *inputs):
        return self.compiled(*inputs)
