"""2-D max pooling, kernel 3, stride 2, no padding (NCHW).

Naive reference: the library module ``nn.MaxPool2d``, the natural first version. On a CPU with one
thread its generic windowed kernel is slow, and a separable formulation (max over the window's
columns, then over its rows, each as a few strided elementwise maxima) does far less work per
output. Max is exact, so any order of evaluation gives the same bits.
"""
import torch
import torch.nn as nn

batch_size = 2
channels = 32
height = 64
width = 64

AUTOTUNE_SIZES = {
    "cpu": {"batch_size": 2, "channels": 32, "height": 64, "width": 64},
    "cuda": {"batch_size": 32, "channels": 64, "height": 256, "width": 256},
    "mlx": {"batch_size": 2, "channels": 32, "height": 64, "width": 64},
}
AUTOTUNE_SHAPE_RANGES = {"batch_size": (1, 4), "channels": (1, 16), "height": (3, 64), "width": (3, 64)}


class Model(nn.Module):
    def __init__(self, kernel_size: int, stride: int):
        super().__init__()
        self.pool = nn.MaxPool2d(kernel_size=kernel_size, stride=stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(x)


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [3, 2]
