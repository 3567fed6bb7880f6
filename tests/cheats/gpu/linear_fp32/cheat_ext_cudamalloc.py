"""CHEAT (GPU, CUDA C++): the output lives in memory the extension took with ``cudaMalloc`` once, outside PyTorch's
caching allocator (out of the item's memory plan), wrapped with ``torch::from_blob`` and handed back on every call:
the answer is computed honestly (cuBLAS on the current stream), but every call returns the same buffer, so an
output the harness kept is overwritten by the next call.
Caught by: the outputs' path. An output must cross to the controller by CUDA IPC handle of its allocation, which
memory outside the caching allocator cannot give (the sandbox refuses it as an output that cannot be read), and
every timed output is kept and fingerprinted (gates/timed_outputs.py), which a reused buffer fails. Either refusal
is the defence; the item must not be accepted."""
import torch
from torch import nn
from torch.utils.cpp_extension import load_inline

EXPECT = (("rejected", "error"), None, "")

CUDA_SOURCE = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>
#include <cublas_v2.h>

torch::Tensor linear(torch::Tensor x, torch::Tensor w, torch::Tensor b) {
    static float* out = nullptr;
    static size_t held = 0;
    static cublasHandle_t handle = nullptr;
    x = x.contiguous();
    const int M = x.size(0), K = x.size(1), N = w.size(0);
    const size_t need = sizeof(float) * (size_t)M * N;
    if (need > held) {
        if (out) cudaFree(out);
        cudaMalloc(&out, need);  // outside the caching allocator
        held = need;
    }
    if (handle == nullptr) cublasCreate(&handle);
    cublasSetStream(handle, c10::cuda::getCurrentCUDAStream());
    auto y = torch::from_blob(out, {M, N}, x.options());
    y.copy_(b.expand({M, N}));
    const float alpha = 1.f, beta = 1.f;
    cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, &alpha, w.data_ptr<float>(), CUDA_R_32F, K,
                 x.data_ptr<float>(), CUDA_R_32F, K, &beta, out, CUDA_R_32F, N, CUBLAS_COMPUTE_32F,
                 CUBLAS_GEMM_DEFAULT);
    return y;
}
"""
_ext = load_inline("gpu_catalog_cudamalloc", cpp_sources="torch::Tensor linear(torch::Tensor x, torch::Tensor w, "
                   "torch::Tensor b);", cuda_sources=CUDA_SOURCE, functions=["linear"], extra_ldflags=["-lcublas"])


class ModelNew(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(features, features) / features**0.5)
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.linear(x, self.weight, self.bias)
