"""The probes' input domain (``[probes].magnitudes``): which adversarial inputs are inside a problem's domain.

A probe tests the candidate against the reference on inputs the problem could be given. An honest candidate that
computes the op with another standard algorithm -- ``torch.compile`` of the reference above all, which is honest by
construction -- must pass. At 1e30, a float32 layer norm's sum of squares overflows (1e60 > 3.4e38) in any
one-pass algorithm; the eager reference happened to stay finite on the H200 with a two-pass one, and the compiled
40_LayerNorm anchor was refused for NaN (docs/guide/anchors.md). That is a probe outside the op's domain, not a cheat.

The rule, ``"overflow-safe"``: every magnitude a probe draws is at most ``M = sqrt(acc_max / (16 n))``, where ``n``
is the element count of the largest floating input and ``acc_max`` the largest value of the type such arithmetic
accumulates in (float32 for 16-bit floats, the dtype itself otherwise): a sum of squares, or of products, of every
element of any input stays below ``acc_max / 16``. Below the value's own bound (``max / 64``, as before). A
problem that declares ``AUTOTUNE_INPUT_DOMAIN`` owns its domain and gets the scales unbounded; so do protocols 1-5
(``"any"``).
"""

from __future__ import annotations

import math
from typing import Optional

import torch

from ..problems.loader import LoadedProblem

#: the share of the accumulator's range a sum over every element may reach
SAFETY = 16.0

_ACCUMULATOR = {"float16": torch.float32, "bfloat16": torch.float32}


def max_magnitude(rule: str, problem: LoadedProblem, signature: list[dict]) -> Optional[float]:
    """The largest magnitude a probe's value pattern may produce, or None where it is not bounded."""
    if rule != "overflow-safe" or problem.input_domain is not None:
        return None
    floating = [s for s in signature if s.get("tensor") and s.get("floating")]
    if not floating:
        return None
    bounds = []
    for s in floating:
        dtype = getattr(torch, str(s.get("dtype")), None)
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            continue
        acc = _ACCUMULATOR.get(str(s.get("dtype")), dtype)
        n = max(1, max(math.prod(int(d) for d in t.get("shape", [])) for t in floating))
        bounds.append(min(math.sqrt(torch.finfo(acc).max / (SAFETY * n)), torch.finfo(dtype).max / 64))
    return min(bounds) if bounds else None


#: patterns that multiply the drawn values by their scale: the values are up to ~6x their scale (randn's largest
#: of a billion draws), so the scale stays an eighth of the cap
MULTIPLYING = ("large", "spikes", "rounding_bias")


def bounded(pattern: Optional[dict], cap: Optional[float]) -> Optional[dict]:
    """``pattern`` with its values within ``cap`` (patterns without a scale are left as they are)."""
    if not pattern or cap is None or "scale" not in pattern:
        return pattern
    limit = cap / 8 if pattern.get("name") in MULTIPLYING else cap
    return {**pattern, "scale": min(float(pattern["scale"]), limit)}


__all__ = ["max_magnitude", "bounded", "SAFETY"]
