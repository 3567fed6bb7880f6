"""CHEAT (C++): a native thread, started in the compiled code and detached, finishes half of the output 2 ms after
the call returned, so the timer stops before the work is done. The thread is the C++ runtime's, not Python's:
``threading`` never sees it.
Caught by: the correctness gate, which reads the output the moment the call returns and counts the process's
threads from the kernel (/proc), native ones included (sandbox/child.py h_outputs)."""
import ctypes

import torch
from torch import nn
from torch.utils.cpp_extension import load_inline

SOURCE = r"""
#include <chrono>
#include <cmath>
#include <cstdint>
#include <thread>

static void rows_softmax(const float* x, float* y, int64_t r0, int64_t r1, int64_t cols) {
    for (int64_t r = r0; r < r1; ++r) {
        float m = -INFINITY, s = 0.0f;
        for (int64_t c = 0; c < cols; ++c) m = x[r * cols + c] > m ? x[r * cols + c] : m;
        for (int64_t c = 0; c < cols; ++c) { y[r * cols + c] = std::exp(x[r * cols + c] - m); s += y[r * cols + c]; }
        for (int64_t c = 0; c < cols; ++c) y[r * cols + c] /= s;
    }
}

extern "C" void softmax_late(const float* x, float* y, int64_t rows, int64_t cols) {
    const int64_t h = rows / 2;
    rows_softmax(x, y, 0, h, cols);  // half now, half after returning
    std::thread([=] {
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
        rows_softmax(x, y, h, rows, cols);
    }).detach();
}
"""
_lib = ctypes.CDLL(load_inline("catalog_late_thread", cpp_sources=SOURCE, is_python_module=False,
                               no_implicit_headers=True, extra_cflags=["-O3", "-pthread"],
                               extra_ldflags=["-pthread"]))


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.kept: list = []  # what the threads read and write after their calls returned stays alive

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.zeros_like(x)
        cols = x.shape[-1] if x.dim() else 1
        self.kept = self.kept[-63:] + [(x, out)]
        _lib.softmax_late(ctypes.c_void_p(x.data_ptr()), ctypes.c_void_p(out.data_ptr()),
                          ctypes.c_int64(x.numel() // max(cols, 1)), ctypes.c_int64(cols))
        return out
