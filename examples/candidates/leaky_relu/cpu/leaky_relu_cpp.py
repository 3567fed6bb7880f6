"""Leaky ReLU in C++ through ``load_inline``, for the CPU: a loop over the tensor's host memory.

It lives in ``cpu/``, so it is collected with ``--device=cpu`` only (handed a CUDA tensor, a loop on ``data_ptr()``
would read device addresses on the host). A C function without torch's headers, called through ``ctypes``, builds
in a fraction of a second; the build stage compiles it once per item and every later sandbox loads the build.
"""
import ctypes

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

SOURCE = r"""
#include <cstdint>
extern "C" void leaky_relu_f32(const float* __restrict__ x, float* __restrict__ y, int64_t n, float slope) {
    for (int64_t i = 0; i < n; ++i) {
        const float v = x[i];
        const float scaled = v * slope;
        y[i] = v > 0.0f ? v : scaled;
    }
}
"""
# The same arguments in every process: the build stage compiles this call, later sandboxes load what it built.
# -fno-trapping-math lets gcc turn the select into vector compares and blends (without it gcc keeps one branch a
# value: 9.7 ms against 0.2 ms a call at 256 x 4096 on the 2-vCPU development VM); the values are the same.
_lib = ctypes.CDLL(load_inline("example_leaky_relu_f32", cpp_sources=SOURCE, is_python_module=False,
                               no_implicit_headers=True, extra_cflags=["-O3", "-fno-trapping-math"]))
_lib.leaky_relu_f32.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_float]
_lib.leaky_relu_f32.restype = None


class ModelNew(nn.Module):
    def __init__(self, negative_slope: float = 0.01):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype != torch.float32 or x.device.type != "cpu":
            raise TypeError(f"leaky_relu_cpp: a float32 CPU tensor, not {x.dtype} on {x.device}")
        x = x.contiguous()  # the loop reads x as one dense array: a strided or transposed view must be copied first
        y = torch.empty_like(x)
        _lib.leaky_relu_f32(x.data_ptr(), y.data_ptr(), x.numel(), self.negative_slope)
        return y
