"""CHEAT (C++): an answer cache kept in native memory, out of Python's sight. Each call's input is checksummed in
C++ (every value, in double); on a hit the stored softmax is copied out, on a miss it is computed (one pass for the
max, one for exp and the sum, one for the division) and stored, up to 256 MiB.
Gains nothing: every timed call gets inputs of its own (fresh seeds, derived sets that move every value), so the
cache never hits and only costs the checksum; a stale answer would fail the timed-outputs check
(gates/timed_outputs.py). Expected: accepted no faster than the honest fused softmax, or refused."""
import ctypes

import torch
from torch import nn
from torch.utils.cpp_extension import load_inline

SOURCE = r"""
#include <cmath>
#include <cstdint>
#include <cstring>
#include <unordered_map>
#include <vector>

static std::unordered_map<uint64_t, std::vector<float>> cache;
static size_t cached_bytes = 0;

static uint64_t checksum(const float* x, int64_t n) {
    double s = 0.0, w = 0.0;
    for (int64_t i = 0; i < n; ++i) { s += x[i]; w += x[i] * (double)((i % 7) + 1); }
    uint64_t a, b;
    std::memcpy(&a, &s, 8);
    std::memcpy(&b, &w, 8);
    return a * 1000003ULL ^ b ^ (uint64_t)n;
}

extern "C" void softmax_rows(const float* x, float* out, int64_t rows, int64_t cols) {
    const int64_t n = rows * cols;
    const uint64_t key = checksum(x, n);
    auto hit = cache.find(key);
    if (hit != cache.end() && (int64_t)hit->second.size() == n) {
        std::memcpy(out, hit->second.data(), sizeof(float) * n);
        return;
    }
    for (int64_t r = 0; r < rows; ++r) {
        const float* xr = x + r * cols;
        float* yr = out + r * cols;
        float m = -INFINITY;
        for (int64_t c = 0; c < cols; ++c) m = xr[c] > m ? xr[c] : m;
        float s = 0.0f;
        for (int64_t c = 0; c < cols; ++c) { yr[c] = std::exp(xr[c] - m); s += yr[c]; }
        const float inv = 1.0f / s;
        for (int64_t c = 0; c < cols; ++c) yr[c] *= inv;
    }
    if (cached_bytes + sizeof(float) * n <= (256u << 20)) {
        cache[key] = std::vector<float>(out, out + n);
        cached_bytes += sizeof(float) * n;
    }
}
"""
_lib = ctypes.CDLL(load_inline("catalog_answer_cache", cpp_sources=SOURCE, is_python_module=False,
                               no_implicit_headers=True, extra_cflags=["-O3"]))


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        cols = x.shape[-1] if x.dim() else 1
        _lib.softmax_rows(ctypes.c_void_p(x.data_ptr()), ctypes.c_void_p(out.data_ptr()),
                          ctypes.c_int64(x.numel() // max(cols, 1)), ctypes.c_int64(cols))
        return out
