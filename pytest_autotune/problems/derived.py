"""Derived input sets: a timing group's k input sets made from one ``get_inputs()`` draw (protocol 8,
``[devices.cpu].input_sets = "derived"``).

Why: every timed call gets an input set of its own, so that no arm can answer a call from an earlier one. Drawn
by ``get_inputs()`` on one CPU thread, a set costs more than the call it feeds (``torch.randn`` of 1M floats:
~5.5 ms on the 2-vCPU VM; a memory-bound call on it: ~0.3-1 ms), and building inputs took most of every
item's timing (docs/results/cpu-2026-11-30.md#per-item-overhead-2026-11-30-protocol-5-2026-12-02). Here one draw, the *base*, is made per group, and each
set's floating-point tensors are the base's times a fresh multiplier::

    x_j[r, c] = base[r, c] * (1 - spread * u_j[r]) * (1 - spread * v_j[c])

on a 2-D view of the tensor (``c`` over its last dimension where that is 16-8192 long, else a square-ish grid),
with ``u_j``, ``v_j`` uniform in [0, 1) from a generator of set j's own: two elementwise passes, ~10x cheaper than
a draw. Every value moves towards zero by up to ~2 x ``spread`` (relative) and keeps its sign, so the sets stay in
the problem's domain: a range containing 0 is kept as it is (probabilities stay in [0, 1]), and a one-signed range
that does not contain 0 is clamped back into the draw's [min, max] (``torch.rand() + 1`` stays in [1, 2)).

Why a cached answer does not pass: a set's outputs differ from another set's by about ``spread`` relative, far
beyond any tolerance in ``protocol.toml``, and the controller checks that for each item before it times anything
(``freshness``): where the reference's outputs on two sets of one base would pass for each other (an op that
ignores positive scaling: ``sign``, ``x > 0``, an argmax that the multipliers do not move), the item's sets are
drawn as before, and the report says so. Why knowing the base does not help: the multiplier has a fresh
per-row and a fresh per-column factor, so even a bilinear op cannot reuse a product of the base (``diag(a) B
diag(b) W`` still needs ``(B diag(b)) W``, a full product). The candidate's sandbox builds its own inputs,
as it did before: patching the derivation there only changes what its own calls see, and the timed outputs are
checked against golden outputs the controller derives itself (gates/timed_outputs.py).

Tensors that are not derived: integer and bool tensors, floating tensors whose values are all whole numbers
(class labels or +-1 targets stored as floats), non-finite or non-contiguous ones. They are cloned into every set
unchanged (a call that writes its inputs in place must not change the next set).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterator, Optional, Sequence

import torch

#: a grid row is the tensor's last dimension when it is this long (fewer: a square-ish grid over all elements)
ROW_MIN, ROW_MAX = 16, 8192
#: the derivation's generator: its own seed stream, apart from the draw's (same seed, other constant)
_SALT = 0x5DEECE66D

DERIVABLE_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


@dataclass
class _Leaf:
    """One input of the base: derived (``lo``/``hi``/``row`` set) or copied (``row`` 0)."""

    value: Any
    lo: float = 0.0
    hi: float = 0.0
    row: int = 0


def _row(t: torch.Tensor) -> int:
    n = t.numel()
    last = int(t.shape[-1]) if t.dim() >= 1 else 1
    if ROW_MIN <= last <= ROW_MAX:
        return last
    return max(1, math.isqrt(n))


def _leaf(x: Any) -> _Leaf:
    if not isinstance(x, torch.Tensor) or x.dtype not in DERIVABLE_DTYPES or x.numel() == 0 \
            or not x.is_contiguous() or x.requires_grad:
        return _Leaf(x)
    lo_t, hi_t = torch.aminmax(x.reshape(-1))
    lo, hi = float(lo_t), float(hi_t)
    if not (math.isfinite(lo) and math.isfinite(hi)) or lo == hi:
        return _Leaf(x)
    if torch.equal(x, torch.round(x)):  # whole numbers: labels, +-1 targets, counts
        return _Leaf(x)
    return _Leaf(x, lo, hi, _row(x))


class DerivedBase:
    """A draw, looked at once: which of its inputs are derived, and their ranges (shared by a round's groups)."""

    def __init__(self, base: Sequence[Any]) -> None:
        self.leaves = [_leaf(x) for x in base]


class DerivedSets:
    """The k sets of one group, from one base draw. Set ``j`` has a generator of its own (seeded by the group's seed
    and ``j``), so any one set can be built without the ones before it (the timed-outputs gate checks a few)."""

    def __init__(self, base: "Sequence[Any] | DerivedBase", seed: int, spread: float) -> None:
        self.leaves = (base if isinstance(base, DerivedBase) else DerivedBase(base)).leaves
        self.spread = float(spread)
        self.seed = int(seed)
        self.device = next((leaf.value.device for leaf in self.leaves if isinstance(leaf.value, torch.Tensor)),
                           torch.device("cpu"))

    @property
    def derives_any(self) -> bool:
        return any(leaf.row for leaf in self.leaves)

    def _derive(self, leaf: _Leaf, gen: torch.Generator) -> torch.Tensor:
        """``base * (1 - spread * u[r]) * (1 - spread * v[c])`` with u, v uniform in [0, 1): two passes, the second
        in place on what the first just wrote. Every value moves towards zero by up to ~2 x spread and keeps its
        sign, so a range that contains 0 is kept without a clamp; a one-signed range (``torch.rand() + 1``) is
        clamped back into the draw's [min, max]."""
        x: torch.Tensor = leaf.value
        flat = x.reshape(-1)
        n, row = flat.numel(), leaf.row
        rows = -(-n // row)
        a = torch.rand(rows, generator=gen, device=x.device, dtype=torch.float32).mul_(-self.spread).add_(1.0)
        b = torch.rand(row, generator=gen, device=x.device, dtype=torch.float32).mul_(-self.spread).add_(1.0)
        a, b = a.to(x.dtype), b.to(x.dtype)
        out = torch.empty_like(flat)
        full = (n // row) * row
        if full:
            o2 = out[:full].view(-1, row)
            torch.mul(flat[:full].view(-1, row), a[: full // row, None], out=o2)
            o2.mul_(b[None, :])
        if full < n:
            out[full:] = flat[full:] * a[-1] * b[: n - full]
        if leaf.lo > 0 or leaf.hi < 0:
            out.clamp_(leaf.lo, leaf.hi)
        return out.view(x.shape)

    def set_at(self, j: int) -> list:
        gen = torch.Generator(device=self.device).manual_seed((self.seed * 1_000_003 + int(j) + _SALT) % (1 << 63))
        return [self._derive(leaf, gen) if leaf.row else
                (leaf.value.clone() if isinstance(leaf.value, torch.Tensor) else leaf.value)
                for leaf in self.leaves]

    def sets(self, count: int, only: Optional[Sequence[int]] = None) -> Iterator[list]:
        """Sets ``0..count-1`` in order (``only``: just those indices)."""
        for j in (range(int(count)) if only is None else sorted(only)):
            box = [self.set_at(j)]
            yield box.pop()


def derive_spread(recipe: dict) -> Optional[float]:
    """The recipe's ``derive`` spread, or None where its sets are drawn."""
    spread = recipe.get("derive")
    return float(spread) if spread else None


__all__ = ["DerivedBase", "DerivedSets", "derive_spread", "DERIVABLE_DTYPES"]
