"""ReLU in CUDA C++ through ``torch.utils.cpp_extension.load_inline``: one read and one write per element, 16-byte
loads and stores (float4) where the tensor allows them, a grid-stride loop, on the current stream.

Collected with ``--device=cuda`` only (``candidates/<problem>/cuda/``). The build stage compiles it once per item
with nvcc and every later sandbox of the item loads the build (docs/guide/compiled-candidates.md).
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SOURCE = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

__global__ void relu_vec4(const float4* __restrict__ x, float4* __restrict__ y, int64_t n4) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n4; i += (int64_t)gridDim.x * blockDim.x) {
        float4 v = x[i];
        v.x = v.x < 0.f ? 0.f : v.x;  // NaN stays NaN, as in the reference
        v.y = v.y < 0.f ? 0.f : v.y;
        v.z = v.z < 0.f ? 0.f : v.z;
        v.w = v.w < 0.f ? 0.f : v.w;
        y[i] = v;
    }
}

__global__ void relu_scalar(const float* __restrict__ x, float* __restrict__ y, int64_t start, int64_t n) {
    for (int64_t i = start + blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const float v = x[i];
        y[i] = v < 0.f ? 0.f : v;
    }
}

torch::Tensor relu(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32, "relu: a float32 CUDA tensor");
    const c10::cuda::CUDAGuard guard(x.device());
    x = x.contiguous();
    auto y = torch::empty_like(x);
    const int64_t n = x.numel();
    if (n == 0) return y;
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    const int threads = 256;
    int sms = 0;
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, x.get_device()));
    const bool aligned = reinterpret_cast<uintptr_t>(x.data_ptr<float>()) % 16 == 0 &&
                         reinterpret_cast<uintptr_t>(y.data_ptr<float>()) % 16 == 0;
    int64_t done = 0;
    if (aligned && n >= 4) {
        const int64_t n4 = n / 4;
        const int blocks = (int)std::min<int64_t>((n4 + threads - 1) / threads, (int64_t)sms * 8);
        relu_vec4<<<blocks, threads, 0, stream>>>(reinterpret_cast<const float4*>(x.data_ptr<float>()),
                                                   reinterpret_cast<float4*>(y.data_ptr<float>()), n4);
        done = n4 * 4;
    }
    if (done < n) {
        const int blocks = (int)std::min<int64_t>((n - done + threads - 1) / threads, (int64_t)sms * 8);
        relu_scalar<<<blocks, threads, 0, stream>>>(x.data_ptr<float>(), y.data_ptr<float>(), done, n);
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""
CPP_SOURCE = "torch::Tensor relu(torch::Tensor x);"

_ext = load_inline("level1_relu_cuda", cpp_sources=CPP_SOURCE, cuda_sources=CUDA_SOURCE, functions=["relu"],
                   extra_cuda_cflags=["-O3"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype != torch.float32:
            return torch.relu(x)
        return _ext.relu(x)
