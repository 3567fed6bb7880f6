"""Hard-swish in C++ through ``torch.utils.cpp_extension.load_inline``: x * clamp(x + 3, 0, 6) / 6 per element in
registers, one read and one write, vectorized by the compiler at -O3.

A small translation unit without torch's headers (a C function on the tensors' memory, called through ctypes): it
builds in ~0.2 s. The build stage compiles it once per item and every later sandbox loads the build
(docs/guide/compiled-candidates.md).
"""
import ctypes

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

SOURCE = r"""
#include <cstdint>

extern "C" void hardswish_f32(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
        const float v = x[i];
        float t = v + 3.0f;
        t = t < 0.0f ? 0.0f : t;
        t = t > 6.0f ? 6.0f : t;  // NaN falls through both: NaN, as in the reference
        y[i] = v * t / 6.0f;
    }
}
"""

_lib = ctypes.CDLL(load_inline("level1_hardswish_f32", cpp_sources=SOURCE, is_python_module=False,
                               no_implicit_headers=True, extra_cflags=["-O3"]))
_lib.hardswish_f32.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
_lib.hardswish_f32.restype = None


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype != torch.float32:
            return F.hardswish(x)
        x = x.contiguous()
        y = torch.empty_like(x)
        _lib.hardswish_f32(x.data_ptr(), y.data_ptr(), x.numel())
        return y
