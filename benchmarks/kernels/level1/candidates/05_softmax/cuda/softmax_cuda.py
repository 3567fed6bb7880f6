"""Softmax over the last dimension in CUDA C++ through ``torch.utils.cpp_extension.load_inline``: one block per row,
an online pass that keeps each thread's running max and its sum of exponentials (rescaled when the max moves),
a block reduction of those pairs (warp shuffles, then one warp), and one pass that writes exp(x - max) / sum. Two
reads and one write of the row instead of the reference's five passes and three temporaries.

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
#include <cfloat>

constexpr int THREADS = 512;

__device__ __forceinline__ void merge(float& m, float& s, float m2, float s2) {
    // (m, s): a running max and the sum of exp(x - m); merging two such pairs
    if (m2 > m) { s = s * expf(m - m2) + s2; m = m2; }
    else if (m2 > -FLT_MAX) { s += s2 * expf(m2 - m); }
}

__global__ void softmax_rows(const float* __restrict__ x, float* __restrict__ y, int64_t cols) {
    const float* xr = x + blockIdx.x * cols;
    float* yr = y + blockIdx.x * cols;
    float m = -FLT_MAX, s = 0.f;
    bool nan = false;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
        const float v = xr[c];
        nan |= v != v;
        merge(m, s, v, 1.f);
    }
    for (int off = 16; off > 0; off >>= 1) {
        const float m2 = __shfl_xor_sync(0xffffffff, m, off);
        const float s2 = __shfl_xor_sync(0xffffffff, s, off);
        merge(m, s, m2, s2);
    }
    __shared__ float sm[THREADS / 32], ss[THREADS / 32];
    __shared__ int snan;
    if (threadIdx.x == 0) snan = 0;
    __syncthreads();
    if (nan) snan = 1;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) { sm[warp] = m; ss[warp] = s; }
    __syncthreads();
    if (warp == 0) {
        m = lane < blockDim.x / 32 ? sm[lane] : -FLT_MAX;
        s = lane < blockDim.x / 32 ? ss[lane] : 0.f;
        for (int off = 16; off > 0; off >>= 1) {
            const float m2 = __shfl_xor_sync(0xffffffff, m, off);
            const float s2 = __shfl_xor_sync(0xffffffff, s, off);
            merge(m, s, m2, s2);
        }
        if (lane == 0) { sm[0] = m; ss[0] = s; }
    }
    __syncthreads();
    const float rmax = sm[0];
    const float inv = snan ? __int_as_float(0x7fc00000) : 1.f / ss[0];
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) yr[c] = expf(xr[c] - rmax) * inv;
}

torch::Tensor softmax(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32 && x.dim() >= 1, "softmax: a float32 CUDA tensor");
    const c10::cuda::CUDAGuard guard(x.device());
    x = x.contiguous();
    auto y = torch::empty_like(x);
    const int64_t cols = x.size(-1);
    const int64_t rows = cols ? x.numel() / cols : 0;
    if (rows == 0 || cols == 0) return y;
    softmax_rows<<<(unsigned)rows, THREADS, 0, c10::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), y.data_ptr<float>(), cols);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""
CPP_SOURCE = "torch::Tensor softmax(torch::Tensor x);"

_ext = load_inline("level1_softmax_cuda", cpp_sources=CPP_SOURCE, cuda_sources=CUDA_SOURCE, functions=["softmax"],
                   extra_cuda_cflags=["-O3"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype != torch.float32:
            return torch.softmax(x, dim=-1)
        return _ext.softmax(x)
