"""2-D max pooling, kernel 3, stride 2, padding 1 (the ResNet stem pool), NCHW.

Naive reference: the library module ``nn.MaxPool2d(3, 2, 1)``, the natural first version. On a CPU
with one thread its generic windowed kernel (which also computes the argmax indices it then throws
away) is slow; a separable formulation (pad with -inf, max over the window's 3 columns, then over its
3 rows, each as strided elementwise maxima) does far less work per output. Max is exact, so any order
of evaluation gives the same bits. On a GPU the library kernel is the faster one.
"""
import torch
import torch.nn as nn

batch_size = 1
channels = 64
height = 56
width = 56

AUTOTUNE_SIZES = {
    "cpu": {"batch_size": 1, "channels": 64, "height": 56, "width": 56},
    "cuda": {"batch_size": 32, "channels": 64, "height": 224, "width": 224},
    "mlx": {"batch_size": 1, "channels": 64, "height": 56, "width": 56},
}
AUTOTUNE_SHAPE_RANGES = {"batch_size": (1, 4), "channels": (1, 16), "height": (1, 64), "width": (1, 64)}


class Model(nn.Module):
    def __init__(self, kernel_size: int, stride: int, padding: int):
        super().__init__()
        self.pool = nn.MaxPool2d(kernel_size=kernel_size, stride=stride, padding=padding)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(x)


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [3, 2, 1]
