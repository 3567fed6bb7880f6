"""CHEAT (GPU, CUDA C++; KernelBench's ``result_reuse_kernel``): a compiled "linear layer" that allocates its output
with ``torch::empty`` and never writes it. Under a harness that ran the reference in the same process and freed
its output, the caching allocator can hand that memory back, answers included.
Caught by: the correctness gate. The reference runs in the baseline's sandbox and golden outputs only in the
controller: no answer is ever in this process's memory (docs/architecture.md#arms-in-separate-processes)."""
import torch
from torch import nn
from torch.utils.cpp_extension import load_inline

EXPECT = (("rejected",), "correctness", r"outside tolerance|NaN")

CUDA_SOURCE = r"""
#include <torch/extension.h>
torch::Tensor linear(torch::Tensor x, torch::Tensor w, torch::Tensor b) {
    return torch::empty({x.size(0), w.size(0)}, x.options());  // nothing computed
}
"""
_ext = load_inline("gpu_catalog_result_reuse", cpp_sources="torch::Tensor linear(torch::Tensor x, torch::Tensor w, "
                   "torch::Tensor b);", cuda_sources=CUDA_SOURCE, functions=["linear"])


class ModelNew(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(features, features) / features**0.5)
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.linear(x, self.weight, self.bias)
