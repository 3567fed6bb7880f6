"""Leaky ReLU in CUDA C++ through ``load_inline``: the form KernelBench's agents write (``cuda_sources`` with a
``__global__`` kernel and the host function that launches it, ``cpp_sources`` declaring it, ``functions`` to bind).

It lives in ``cuda/``, so it is collected with ``--device=cuda`` only. The build stage compiles it once per item
with nvcc (about a minute: ``torch/extension.h``); every later sandbox of the item loads the build.
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SOURCE = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

__global__ void leaky_relu_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n, float slope) {
    const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) {
        const float v = x[i];
        y[i] = v > 0.0f ? v : v * slope;
    }
}

torch::Tensor leaky_relu(torch::Tensor x, double negative_slope) {
    TORCH_CHECK(x.is_cuda(), "leaky_relu: x must be a CUDA tensor");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "leaky_relu: x must be float32");
    const c10::cuda::CUDAGuard guard(x.device());
    x = x.contiguous();  // the kernel indexes x as one dense array: a strided or transposed view is copied first
    auto y = torch::empty_like(x);
    const int64_t n = x.numel();
    if (n == 0) return y;
    const int threads = 256;
    const int64_t blocks = (n + threads - 1) / threads;
    TORCH_CHECK(blocks <= 2147483647LL, "leaky_relu: too many elements for one launch");
    leaky_relu_kernel<<<(unsigned int)blocks, threads, 0, c10::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), y.data_ptr<float>(), n, (float)negative_slope);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""
CPP_SOURCE = "torch::Tensor leaky_relu(torch::Tensor x, double negative_slope);"

# the same arguments in every process: the build stage compiles this call, later sandboxes load what it built
_ext = load_inline("example_leaky_relu_cuda", cpp_sources=CPP_SOURCE, cuda_sources=CUDA_SOURCE,
                   functions=["leaky_relu"], extra_cuda_cflags=["-O3"])


class ModelNew(nn.Module):
    def __init__(self, negative_slope: float = 0.01):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.leaky_relu(x, self.negative_slope)
