"""ReLU in C++ through ``torch.utils.cpp_extension.load_inline``: one pass, one branch-free select per element
that the compiler vectorizes at -O3, into a fresh output.

A small translation unit without torch's headers (a C function on the tensors' memory, called through ctypes): it
builds in ~0.2 s, where one that includes ``torch/extension.h`` takes ~25 s on 2 cores. The build stage compiles
it once per item and every later sandbox loads the build (docs/guide/compiled-candidates.md).
"""
import ctypes

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

SOURCE = r"""
#include <cstdint>

extern "C" void relu_f32(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
        const float v = x[i];
        y[i] = v < 0.0f ? 0.0f : v;  // NaN stays NaN, as in the reference
    }
}
"""

_lib = ctypes.CDLL(load_inline("level1_relu_f32", cpp_sources=SOURCE, is_python_module=False,
                               no_implicit_headers=True, extra_cflags=["-O3"]))
_lib.relu_f32.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
_lib.relu_f32.restype = None


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype != torch.float32:
            return torch.relu(x)
        x = x.contiguous()
        y = torch.empty_like(x)
        _lib.relu_f32(x.data_ptr(), y.data_ptr(), x.numel())
        return y
