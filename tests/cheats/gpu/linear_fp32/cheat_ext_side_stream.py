"""CHEAT (GPU, CUDA C++; KernelBench's ``non_default_stream_kernel``): the matmul runs through a cuBLAS handle bound to
a stream the extension created itself (``cudaStreamCreateWithFlags(..., cudaStreamNonBlocking)``), and the call
returns at once. A harness that waits on the current stream only (CUDA events recorded there) times a launch, not
the work. Made once and kept (KernelBench's leaks a stream and a handle per call); the bias add follows on the same
side stream. Correctness passes: reading the output synchronises the whole device.
Caught by: the device-clock check -- host time around each sample with a device-wide synchronisation against the
event time (gates/integrity.py DeviceClockGate)."""
import torch
from torch import nn
from torch.utils.cpp_extension import load_inline

EXPECT = (("rejected",), "integrity", r"outside the timed stream|side streams")

CUDA_SOURCE = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>
#include <cublas_v2.h>

__global__ void add_bias(float* y, const float* b, int64_t rows, int64_t cols) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < rows * cols; i += (int64_t)gridDim.x * blockDim.x)
        y[i] += b[i % cols];
}

torch::Tensor linear(torch::Tensor x, torch::Tensor w, torch::Tensor b) {
    static cudaStream_t side = nullptr;
    static cudaEvent_t ready = nullptr;
    static cublasHandle_t handle = nullptr;
    if (side == nullptr) {
        cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking);
        cudaEventCreateWithFlags(&ready, cudaEventDisableTiming);
        cublasCreate(&handle);
        cublasSetStream(handle, side);
    }
    cudaEventRecord(ready, c10::cuda::getCurrentCUDAStream());  // the inputs are ready; nobody waits for us
    cudaStreamWaitEvent(side, ready, 0);
    x = x.contiguous();
    const int M = x.size(0), K = x.size(1), N = w.size(0);
    auto y = torch::empty({M, N}, x.options());
    const float alpha = 1.f, beta = 0.f;
    // y (M x N, row-major) = x (M x K) . w^T: column-major y^T = w . x^T
    cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, &alpha, w.data_ptr<float>(), CUDA_R_32F, K,
                 x.data_ptr<float>(), CUDA_R_32F, K, &beta, y.data_ptr<float>(), CUDA_R_32F, N,
                 CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    add_bias<<<1024, 256, 0, side>>>(y.data_ptr<float>(), b.data_ptr<float>(), M, N);
    return y;  // nobody waits for the side stream
}
"""
_ext = load_inline("gpu_catalog_side_stream", cpp_sources="torch::Tensor linear(torch::Tensor x, torch::Tensor w, "
                   "torch::Tensor b);", cuda_sources=CUDA_SOURCE, functions=["linear"], extra_ldflags=["-lcublas"])


class ModelNew(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(features, features) / features**0.5)
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.linear(x, self.weight, self.bias)
