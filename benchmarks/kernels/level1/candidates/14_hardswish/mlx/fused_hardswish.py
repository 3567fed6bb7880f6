"""mx.compile fuses add, clip, multiply and divide into one elementwise kernel."""
import mlx.core as mx


def _hardswish(x):
    return x * mx.clip(x + 3.0, 0.0, 6.0) / 6.0


class ModelNewMLX:
    def __init__(self):
        self._fn = mx.compile(_hardswish)

    def __call__(self, x):
        return self._fn(x)
