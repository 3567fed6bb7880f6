"""CHEAT (C++, KernelBench's ``zero_out_kernel`` on the CPU): a compiled "linear layer" that zeroes its input and
returns zeros. Under a harness that runs the reference after the candidate on the same input tensors, the
reference then sees zeros too and both agree.
Caught by: the correctness gate. Golden outputs are computed in the controller from inputs the sandbox never
touched, and the sandbox compares every input bitwise after the call (sandbox/child.py h_outputs)."""
import ctypes

import torch
from torch import nn
from torch.utils.cpp_extension import load_inline

SOURCE = r"""
#include <cstdint>
#include <cstring>
extern "C" void zero_out(float* x, int64_t nx, float* out, int64_t nout) {
    std::memset(x, 0, sizeof(float) * nx);
    std::memset(out, 0, sizeof(float) * nout);
}
"""
_lib = ctypes.CDLL(load_inline("catalog_zero_out", cpp_sources=SOURCE, is_python_module=False,
                               no_implicit_headers=True, extra_cflags=["-O3"]))


class ModelNew(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(features, features) / features**0.5)
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.empty(x.shape[0], self.weight.shape[0])
        if x.is_contiguous():
            _lib.zero_out(ctypes.c_void_p(x.data_ptr()), ctypes.c_int64(x.numel()),
                          ctypes.c_void_p(out.data_ptr()), ctypes.c_int64(out.numel()))
        else:
            x.zero_()
            out.zero_()
        return out
