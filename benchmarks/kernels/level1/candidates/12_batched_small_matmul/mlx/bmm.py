"""One batched mx.matmul instead of a graph of per-matrix matmuls and a stack."""
import mlx.core as mx


class ModelNewMLX:
    def __init__(self):
        pass

    def __call__(self, A, B):
        return mx.matmul(A, B)
