"""Separable max pooling: a k x k window max is the max over k columns of the max over k rows.

Pad with -inf (never the maximum of a window, since every window holds at least one real element
when padding <= k // 2, which nn.MaxPool2d requires), take the elementwise maximum of k strided
column slices (one (H, W_out) plane), then of k strided row slices of that. That is 2(k-1) vectorised
elementwise maxima per plane instead of k*k scalar comparisons (plus argmax bookkeeping) per output in
a generic windowed loop. Max is exact, so the result has the same bits as the reference.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, kernel_size: int, stride: int, padding: int):
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride
        self.padding = padding

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        k, s, p = self.kernel_size, self.stride, self.padding
        if p > 0:
            x = F.pad(x, (p, p, p, p), mode="constant", value=float("-inf"))
        h, w = x.shape[-2], x.shape[-1]
        h_out = (h - k) // s + 1
        w_out = (w - k) // s + 1
        span_w = s * (w_out - 1) + 1
        span_h = s * (h_out - 1) + 1
        if k == 1:
            return x[..., 0:span_h:s, 0:span_w:s].clone()
        cols = torch.maximum(x[..., :, 0:span_w:s], x[..., :, 1:1 + span_w:s])
        for j in range(2, k):
            torch.maximum(cols, x[..., :, j:j + span_w:s], out=cols)
        out = torch.maximum(cols[..., 0:span_h:s, :], cols[..., 1:1 + span_h:s, :])
        for i in range(2, k):
            torch.maximum(out, cols[..., i:i + span_h:s, :], out=out)
        return out
