"""BROKEN: the constructor raises. Caught by: the item fails with the file and the reason."""
from torch import nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        raise RuntimeError("ModelNew refuses to be built")

    def forward(self, x):
        return x
