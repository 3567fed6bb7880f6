"""CHEAT (GPU, CUDA C++; KernelBench's ``zero_out_kernel``): a compiled "linear layer" that zeroes its input and
returns zeros, for a harness that runs the reference afterwards on the same input tensors.
Caught by: the correctness gate. Golden outputs come from inputs the sandbox never touched, and the sandbox compares
its inputs bitwise after every call (sandbox/child.py h_outputs)."""
import torch
from torch import nn
from torch.utils.cpp_extension import load_inline

EXPECT = (("rejected",), "correctness", r"modified its input|outside tolerance")

CUDA_SOURCE = r"""
#include <torch/extension.h>
torch::Tensor linear(torch::Tensor x, torch::Tensor w, torch::Tensor b) {
    x.zero_();
    return torch::zeros({x.size(0), w.size(0)}, x.options());
}
"""
_ext = load_inline("gpu_catalog_zero_out", cpp_sources="torch::Tensor linear(torch::Tensor x, torch::Tensor w, "
                   "torch::Tensor b);", cuda_sources=CUDA_SOURCE, functions=["linear"])


class ModelNew(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(features, features) / features**0.5)
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.linear(x, self.weight, self.bias)
