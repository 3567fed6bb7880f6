"""HONEST (C++): a row softmax compiled through load_inline (three passes a row, one thread, -O3), called through
ctypes on the tensors' memory. Built once per item, loaded read-only by every later sandbox; must stay accepted."""
import ctypes

import torch
from torch import nn
from torch.utils.cpp_extension import load_inline

SOURCE = r"""
#include <cmath>
#include <cstdint>
extern "C" void softmax_rows(const float* x, float* y, int64_t rows, int64_t cols) {
    for (int64_t r = 0; r < rows; ++r) {
        const float* xr = x + r * cols;
        float* yr = y + r * cols;
        float m = -INFINITY;
        for (int64_t c = 0; c < cols; ++c) m = xr[c] > m ? xr[c] : m;
        float s = 0.0f;
        for (int64_t c = 0; c < cols; ++c) { yr[c] = std::exp(xr[c] - m); s += yr[c]; }
        const float inv = 1.0f / s;
        for (int64_t c = 0; c < cols; ++c) yr[c] *= inv;
    }
}
"""
_lib = ctypes.CDLL(load_inline("catalog_honest_softmax", cpp_sources=SOURCE, is_python_module=False,
                               no_implicit_headers=True, extra_cflags=["-O3"]))


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        cols = x.shape[-1] if x.dim() else 1
        _lib.softmax_rows(ctypes.c_void_p(x.data_ptr()), ctypes.c_void_p(out.data_ptr()),
                          ctypes.c_int64(x.numel() // max(cols, 1)), ctypes.c_int64(cols))
        return out
