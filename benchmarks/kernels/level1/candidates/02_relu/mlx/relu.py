"""Compare against a scalar 0 instead of a materialised array of zeros: one pass, one allocation."""
import mlx.core as mx


class ModelNewMLX:
    def __init__(self):
        pass

    def __call__(self, x):
        return mx.maximum(x, 0.0)
