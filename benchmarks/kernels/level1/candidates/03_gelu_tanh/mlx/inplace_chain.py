"""The same formula, with the cube as ``x * x * x``: on MLX's CPU backend ``mx.power`` is a general
transcendental pow, far dearer than two multiplies."""
import math

import mlx.core as mx

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


class ModelNewMLX:
    def __init__(self):
        pass

    def __call__(self, x):
        return 0.5 * x * (1.0 + mx.tanh(_SQRT_2_OVER_PI * (x + 0.044715 * (x * x * x))))
