"""HONEST (C++): a row softmax compiled through load_inline (three passes a row, one thread, -O3), called through
ctypes on the tensors' memory. Built once per item, loaded read-only by every later sandbox; must stay accepted.

The row's sum is added in blocks of 64 (a float32 partial sum each, then their total), as the accuracy rule's fix
says. With one running float32 total over the row's 2,048 values it read 117x the reference's rms error against the
float64 oracle on a ``spikes`` probe (nearly equal values, whose roundings share a sign), over the 100x the rule
allows, and was refused in one run of the suite in five (docs/results/flake-hunt.md, docs/design/accuracy.md)."""
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
        for (int64_t b = 0; b < cols; b += 64) {
            const int64_t end = b + 64 < cols ? b + 64 : cols;
            float part = 0.0f;
            for (int64_t c = b; c < end; ++c) { yr[c] = std::exp(xr[c] - m); part += yr[c]; }
            s += part;
        }
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
