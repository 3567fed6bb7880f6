"""CHEAT (C++, KernelBench's ``result_reuse_kernel`` on the CPU): a compiled "linear layer" that allocates its output
and never writes it. Under a harness that runs the reference first in the same process and frees its output, the
allocator can hand that very memory back, answers included, to the candidate's empty output.
Caught by: the correctness gate. The reference runs in another process (the baseline's sandbox) and the golden
outputs only in the controller, so no answer is ever in this process's memory; an output never written fails on
the first seed (docs/architecture.md#arms-in-separate-processes)."""
import ctypes

import torch
from torch import nn
from torch.utils.cpp_extension import load_inline

SOURCE = r"""
#include <cstdint>
// "computes" nothing: whatever the allocator left in the output is the answer
extern "C" void linear_f32(const float* x, const float* w, const float* b, float* out, int64_t rows, int64_t n) {}
"""
_lib = ctypes.CDLL(load_inline("catalog_result_reuse", cpp_sources=SOURCE, is_python_module=False,
                               no_implicit_headers=True, extra_cflags=["-O3"]))


class ModelNew(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(features, features) / features**0.5)
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty(x.shape[0], self.weight.shape[0])
        _lib.linear_f32(ctypes.c_void_p(x.data_ptr()), ctypes.c_void_p(self.weight.data_ptr()),
                        ctypes.c_void_p(self.bias.data_ptr()), ctypes.c_void_p(out.data_ptr()),
                        ctypes.c_int64(x.shape[0]), ctypes.c_int64(x.shape[1]))
        return out
