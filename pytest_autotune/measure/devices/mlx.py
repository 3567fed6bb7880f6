"""MLX device (the held-out retest leg): MLX ports of reference and candidates, ``mx.eval`` inside the timed
region (MLX is lazy: without it nothing would be timed), correctness against the torch reference."""

from __future__ import annotations

import platform
import time
from typing import Any, Callable, Optional, Sequence

import numpy as np
import torch

from .base import Device, Sample


def _mx():
    import mlx.core as mx

    return mx


class MlxDevice(Device):
    name = "mlx"
    framework = "mlx"

    @classmethod
    def unavailable_reason(cls) -> Optional[str]:
        try:
            _mx()
        except ImportError as e:
            extra = "mlx[cpu]" if platform.system() == "Linux" else "mlx"
            return (
                f"--device=mlx: the mlx package is not importable ({e}); "
                f"install it with `pip install '{extra}'` (or `pip install -e '.[mlx]'`)"
            )
        return None

    def setup(self, threads: int) -> None:
        super().setup(threads)
        mx = _mx()
        if self.options.get("mlx_device") == "cpu" or not _has_gpu(mx):
            mx.set_default_device(mx.cpu)

    def warm_runtime(self) -> None:
        mx = _mx()
        mx.eval(mx.array([1.0, 2.0]) * 2)

    def fingerprint(self) -> dict[str, Any]:
        fp = super().fingerprint()
        mx = _mx()
        import mlx

        fp.update(mlx_version=getattr(mlx, "__version__", None) or getattr(mx, "__version__", None),
                  default_device=str(mx.default_device()), platform=platform.platform())
        return fp

    def to_device(self, value: Any) -> Any:
        mx = _mx()
        if isinstance(value, torch.Tensor):
            t = value.detach().cpu()
            if t.dtype == torch.bfloat16:
                return mx.array(t.float().numpy()).astype(mx.bfloat16)
            return mx.array(t.numpy())
        return value

    def synchronize(self) -> None:
        _mx().synchronize() if hasattr(_mx(), "synchronize") else None

    def to_host(self, out: Any) -> Any:
        mx = _mx()
        if isinstance(out, mx.array):
            mx.eval(out)
            if out.dtype == mx.bfloat16:
                return torch.from_numpy(np.array(out.astype(mx.float32))).to(torch.bfloat16)
            return torch.from_numpy(np.array(out, copy=True))
        if isinstance(out, (list, tuple)):
            return tuple(self.to_host(o) for o in out)
        return out

    def output_location(self, out: Any) -> str:
        mx = _mx()
        if isinstance(out, mx.array):
            return "mlx"
        if isinstance(out, torch.Tensor):
            return "torch"
        return type(out).__name__

    def timed(self, fn: Callable[..., Any], batches: Sequence[Sequence[Any]]) -> Sample:
        mx = _mx()
        outs: list = [None] * len(batches)
        clock = time.perf_counter_ns
        t0 = clock()
        for i, b in enumerate(batches):
            outs[i] = fn(*b)
        mx.eval(*[o for o in outs if o is not None])
        t1 = clock()
        s = (t1 - t0) * 1e-9
        return Sample(seconds=s, host_seconds=s, outputs=outs)

    def timer_functions(self) -> dict[str, Any]:
        mx = _mx()
        return {"time.perf_counter_ns": time.perf_counter_ns, "mlx.core.eval": mx.eval}


def _has_gpu(mx) -> bool:
    try:
        return bool(mx.metal.is_available())
    except Exception:  # noqa: BLE001
        return False
