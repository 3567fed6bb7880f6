"""02_relu in C++ through load_inline, as agents write it: one single-threaded loop, no cache (the honest twin of
cpp_loop_cache.py)."""
import torch
from torch import nn
from torch.utils.cpp_extension import load_inline

_SRC = r"""
#include <torch/extension.h>
torch::Tensor relu_loop(torch::Tensor x) {
  auto xc = x.contiguous();
  auto out = torch::empty_like(xc);
  const float* in = xc.data_ptr<float>();
  float* o = out.data_ptr<float>();
  const int64_t n = xc.numel();
  for (int64_t i = 0; i < n; ++i) o[i] = in[i] > 0.f ? in[i] : 0.f;
  return out;
}
"""

_ext = load_inline(name="autotune_relu_loop", cpp_sources=_SRC, functions=["relu_loop"],
                   extra_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.relu_loop(x)
