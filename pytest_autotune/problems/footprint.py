"""What one call of a problem holds, from shapes alone (PyTorch's meta device): its inputs, its output and the
reference's parameters, before any byte is allocated on the device. The item's memory plan starts from it
(measure/memory.py); the controller then measures the reference's transient workspace on the device."""

from __future__ import annotations

from typing import Any, Optional

import torch

from ..measure.memory import CallFootprint
from .loader import LoadedProblem


def _nbytes(value: Any) -> int:
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, (list, tuple)):
        return sum(_nbytes(v) for v in value)
    return 0


def meta_footprint(problem: LoadedProblem, sizes: dict, init_seed: int) -> tuple[CallFootprint, Optional[str]]:
    """The footprint of one reference call at ``sizes``, and why the output's size is a guess where the reference
    cannot run on meta tensors (then the output is taken to be as large as the inputs until it is measured)."""
    why: Optional[str] = None
    with problem.sizes(sizes), torch.device("meta"):
        inputs = problem.raw_inputs(0)
        in_bytes = _nbytes(inputs)
        floats = [t.element_size() for t in (inputs if isinstance(inputs, (list, tuple)) else [inputs])
                  if isinstance(t, torch.Tensor) and t.is_floating_point()]
        params = 0
        out_bytes = in_bytes
        try:
            model = problem.build_reference(init_seed)
            params = sum(_nbytes(t) for t in list(model.parameters()) + list(model.buffers())) \
                if isinstance(model, torch.nn.Module) else 0
            with torch.no_grad():
                out_bytes = _nbytes(model(*inputs))
        except Exception as e:  # noqa: BLE001 - an op without a meta kernel, a data-dependent shape, .item()
            why = f"the reference does not run on meta tensors ({type(e).__name__}: {str(e).splitlines()[0][:120]})"
    return CallFootprint(input_bytes=in_bytes, output_bytes=out_bytes, param_bytes=params, source="meta",
                         float_bytes=min(floats, default=4)), why


def meta_signature(problem: LoadedProblem, sizes: dict) -> Optional[list[dict]]:
    """The inputs' shapes and dtypes (``inputs.inputs_signature``) from meta tensors, without allocating a set of
    them; None where ``get_inputs()`` does not run on the meta device."""
    from .inputs import inputs_signature

    try:
        with problem.sizes(sizes), torch.device("meta"):
            return inputs_signature(problem.raw_inputs(0))
    except Exception:  # noqa: BLE001 - a get_inputs() that needs real values
        return None


__all__ = ["meta_footprint", "meta_signature"]
