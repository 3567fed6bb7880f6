"""One mx.sum over axis 1 instead of a graph of n adds."""
import mlx.core as mx


class ModelNewMLX:
    def __init__(self):
        pass

    def __call__(self, x):
        return mx.sum(x, axis=1)
