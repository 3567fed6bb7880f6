"""The float64 oracle: the reference run in float64 on a recipe's inputs, in the controller (docs/design/accuracy.md).

The reference model is built again from the item's init seed (its parameters are the golden model's, bit for bit),
then converted with ``.double()``; the recipe's inputs are the sandboxes' exactly (:meth:`Golden.inputs`), their
floating tensors widened to float64 (exactly: every float32, float16 and bfloat16 value is a float64 value). What
comes out is the same function of the same numbers, computed with 53-bit instead of 24-bit significands.

Where it cannot be had the accuracy rule falls back to ``[tolerance.<dtype>]`` and says why on the item
(``details.accuracy.oracle``): a reference that raises in float64 (an op without a float64 kernel), one whose floating
output does not come out float64 (it casts internally: the "oracle" would be the reference again), a problem in
float64 already, or one whose float64 copy does not fit the device beside the item's other processes.
"""

from __future__ import annotations

import json
from typing import Any, Optional

import torch

from .errors import ProblemLoadError
from .golden import Golden
from .tree import leaves

#: output dtypes the oracle replaces with float64 (complex ones with complex128)
_WIDENED = {torch.float32: torch.float64, torch.float16: torch.float64, torch.bfloat16: torch.float64,
            torch.complex64: torch.complex128}


class OracleUnavailable(Exception):
    """The float64 oracle cannot be computed for this item or recipe; ``reason`` says why."""


def _widen(x: Any) -> Any:
    if isinstance(x, torch.Tensor) and x.dtype in _WIDENED:
        return x.to(_WIDENED[x.dtype])
    return x


class Oracle:
    """``oracle(recipe)`` -> the float64 outputs (a tensor or a tuple, like the golden output's), or
    :class:`OracleUnavailable`. Nothing is kept between calls but the float64 models: a gate asks once a recipe, and
    at published sizes one output is GBs, twice the golden one's (the caller drops it once compared)."""

    def __init__(self, golden: Golden) -> None:
        self.golden = golden
        self._models: dict[str, Any] = {}
        self.unavailable: Optional[str] = None  # set once the reference is known not to run in float64

    def _model(self, sizes: dict) -> Any:
        key = json.dumps(sorted(sizes.items()))
        if key not in self._models:
            g = self.golden
            try:
                with g.problem.sizes(sizes):
                    m = g.problem.build_reference(g.init_seed)
            except ProblemLoadError as e:
                raise OracleUnavailable(f"the reference could not be built again: {e.reason}") from None
            m = g.device.prepare_model(m) if g.on_device else m
            self._models[key] = m.to(torch.float64) if isinstance(m, torch.nn.Module) else m
        return self._models[key]

    def __call__(self, recipe: dict) -> Any:
        if self.unavailable:
            raise OracleUnavailable(self.unavailable)
        sizes = {**self.golden.sizes, **(recipe.get("sizes") or {})}
        try:
            model = self._model(sizes)
            inputs = [_widen(x) for x in self.golden.inputs(recipe)]
            with torch.no_grad():
                out = model(*inputs)
            del inputs
        except OracleUnavailable:
            raise
        except Exception as e:  # noqa: BLE001 - the reference's own code, run in a dtype it was not written for
            self._release()
            if type(e).__name__ == "OutOfMemoryError":
                raise OracleUnavailable("the reference's float64 copy does not fit the device's free memory "
                                        "beside the item's other processes") from None
            self.unavailable = f"the reference raised in float64 ({type(e).__name__}: {str(e).splitlines()[0][:200]})"
            raise OracleUnavailable(self.unavailable) from None
        narrow = [i for i, o in enumerate(leaves(out)) if isinstance(o, torch.Tensor) and o.dtype in _WIDENED]
        if narrow:
            self.unavailable = (f"the reference's output {narrow[0]} stays "
                                f"{str(leaves(out)[narrow[0]].dtype).replace('torch.', '')} when it runs in float64 "
                                "(it casts internally), so float64 would only repeat it")
            raise OracleUnavailable(self.unavailable)
        return tuple(o.detach() for o in out) if isinstance(out, (list, tuple)) else out.detach()

    def perturbed(self, recipe: dict) -> Any:
        """The float64 outputs on ``recipe``'s inputs with every floating value moved by up to one ulp of its own
        dtype (``x * (1 + eps * u)``, ``u`` uniform in [-1, 1] from the recipe's seed): how far the op itself
        carries its inputs' rounding (gates/accuracy.py). None where the oracle is unavailable."""
        if self.unavailable:
            return None
        sizes = {**self.golden.sizes, **(recipe.get("sizes") or {})}
        try:
            model = self._model(sizes)
            inputs = []
            for j, x in enumerate(self.golden.inputs(recipe)):
                if isinstance(x, torch.Tensor) and x.dtype in _WIDENED and not x.is_complex():
                    eps = torch.finfo(x.dtype).eps
                    gen = torch.Generator(device=x.device).manual_seed((int(recipe["seed"]) + 7919 * (j + 1)) % (1 << 62))
                    u = torch.rand(x.shape, generator=gen, device=x.device, dtype=torch.float64) * 2 - 1
                    x = x.to(torch.float64) * (1 + eps * u)
                    del u
                inputs.append(_widen(x))
            with torch.no_grad():
                out = model(*inputs)
            del inputs
        except OracleUnavailable:
            return None
        except Exception:  # noqa: BLE001 - as in __call__: no oracle, the plain unit stands
            self._release()
            return None
        return tuple(o.detach() for o in out) if isinstance(out, (list, tuple)) else out.detach()

    def _release(self) -> None:
        if self.golden.on_device:
            self.golden.device.release_cached_memory()

    def clear(self) -> None:
        """Drop the float64 models (between an item's stages) and give the allocator's cached blocks back."""
        self._models.clear()
        self._release()


__all__ = ["Oracle", "OracleUnavailable"]
