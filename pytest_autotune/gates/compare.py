"""Output comparison by dtype-aware, output-scaled tolerance. Runs in the controller only, on the device where the
golden output lives (a GPU's outputs never cross to the host: only a handful of scalars come back).

Elementwise rule for floating outputs: ``|out - ref| <= atol * scale + rtol * |ref|`` with ``scale = max|ref|``
(so atol is relative to the output's magnitude, and a problem whose outputs are 1e6 is judged like one whose
outputs are 1). NaN or Inf in a candidate output never pass. Integer and bool outputs must match exactly.
Shape, dtype and structure must match. The arithmetic is float64, over chunks of :data:`CHUNK` elements, so the
temporaries stay a bounded size whatever the output's.

Where the protocol judges accuracy against a float64 oracle (``[accuracy].rule = "float64-oracle"``) and the caller
has the oracle's output, a floating output below float64 is judged by gates/accuracy.py instead of the elementwise
rule: its error against the oracle, measured against the reference's own. :attr:`Comparison.kind` says what went
wrong, for the fix a refusal names (problems/contract.py ``fix_for``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import torch

from ..protocol import Protocol, Tolerance
from ..sandbox.wire import dtype_name
from ..tree import abs_max, float64_sums
from ..tree import leaves as as_list
from . import accuracy

#: elements per chunk of float64 temporaries (128 MiB each)
CHUNK = 1 << 24


@dataclass(frozen=True)
class Comparison:
    ok: bool
    reason: str = ""
    max_abs_err: float = 0.0
    max_rel_err: float = 0.0
    bad_fraction: float = 0.0
    details: dict = field(default_factory=dict)
    #: what went wrong: accuracy | nonfinite | shape | dtype | exact | mismatch | structure ("" when ok)
    kind: str = ""


def tolerance(proto: Protocol, dt: torch.dtype) -> Optional[Tolerance]:
    return proto.tolerance_for(dtype_name(dt))


def ulp_spacing(values64: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The spacing of ``dtype``'s values at each of ``values64`` (float64): eps x |value|, and never less than the
    subnormal step (smallest normal x eps), where rtol and atol x max|ref| reach below what the dtype can tell apart.
    The timed-output check allows the accuracy rule's ``max_floor_ulps`` of it: a product reduction's outputs near
    1e-44 (float32) that the candidate and the reference round one subnormal step apart were refused there on an
    H100 (2026-12-06) while the correctness gate, in ulps, accepted them."""
    fi = torch.finfo(dtype)
    return torch.clamp(values64.abs() * fi.eps, min=fi.smallest_normal * fi.eps)


def allowed_error(tol: Tolerance, scale: float, ref64: torch.Tensor) -> torch.Tensor:
    """The elementwise tolerance rule, in one place: ``atol * max|ref| + rtol * |ref|``."""
    return tol.atol * scale + tol.rtol * ref64.abs()


def compare_outputs(got: Any, ref: Any, proto: Protocol, where: str = "output", oracle: Any = None,
                    perturbed: Optional[Callable[[], Any]] = None) -> Comparison:
    """``got`` against the golden ``ref``; ``oracle``: the reference's float64 outputs on the same inputs (the
    accuracy rule), or None (the tolerance rule); ``perturbed``: the oracle on inputs moved by an ulp, asked for
    only where an output fails (gates/accuracy.py)."""
    g, r = as_list(got), as_list(ref)
    o = as_list(oracle) if oracle is not None else [None] * len(r)
    moved: list = []

    def moved_leaf(i: int) -> Callable[[], Optional[torch.Tensor]]:
        def get() -> Optional[torch.Tensor]:
            if not moved:
                moved.append(None if perturbed is None else perturbed())
            leaves_ = as_list(moved[0]) if moved[0] is not None else []
            x = leaves_[i] if i < len(leaves_) else None
            return x if isinstance(x, torch.Tensor) else None
        return get

    if len(g) != len(r):
        return Comparison(False, f"{where}: {len(g)} tensors returned, the reference returns {len(r)}",
                          kind="structure")
    worst: Optional[Comparison] = None
    rules: dict = {}
    for i, (a, b, x) in enumerate(zip(g, r, o)):
        label = where if len(r) == 1 else f"{where}[{i}]"
        c = compare_tensor(a, b, proto, label, x if isinstance(x, torch.Tensor) else None, moved_leaf(i))
        if not c.ok:
            return c
        if c.details:
            rules[label] = c.details
        if worst is None or c.max_rel_err > worst.max_rel_err:
            worst = c
    out = worst or Comparison(True)
    return Comparison(True, "", out.max_abs_err, out.max_rel_err, 0.0, rules) if rules else out


def _real_flat(t: torch.Tensor) -> torch.Tensor:
    flat = t.reshape(-1)
    return torch.view_as_real(flat).reshape(-1) if flat.is_complex() else flat


def _chunks(n: int) -> range:
    return range(0, n, CHUNK)


def compare_tensor(a: Any, b: torch.Tensor, proto: Protocol, label: str, oracle: Optional[torch.Tensor] = None,
                   perturbed: Optional[Callable[[], Optional[torch.Tensor]]] = None) -> Comparison:
    if not isinstance(a, torch.Tensor):
        return Comparison(False, f"{label}: got {type(a).__name__}, expected a tensor", kind="structure")
    if tuple(a.shape) != tuple(b.shape):
        return Comparison(False, f"{label}: shape {tuple(a.shape)} != reference {tuple(b.shape)}", kind="shape")
    if a.dtype != b.dtype:
        return Comparison(False, f"{label}: dtype {dtype_name(a.dtype)} != reference {dtype_name(b.dtype)}",
                          kind="dtype")
    if a.numel() == 0:
        return Comparison(True)
    if a.device != b.device:  # a host-copy fallback: judge where the golden output lives
        a = a.to(b.device)
    if not (b.is_floating_point() or b.is_complex()):
        if torch.equal(a, b):
            return Comparison(True)
        n_bad = int((a != b).sum())
        return Comparison(False, f"{label}: {n_bad} of {b.numel()} elements differ (exact dtype {dtype_name(b.dtype)})",
                          bad_fraction=n_bad / b.numel(), kind="exact")
    if oracle is not None and accuracy.applies(b, proto.accuracy) and tuple(oracle.shape) == tuple(b.shape):
        return _against_oracle(a, b, oracle, proto, label, perturbed)
    tol = tolerance(proto, b.dtype)
    if tol is None:
        return Comparison(False, f"{label}: no tolerance for dtype {dtype_name(b.dtype)} in the protocol",
                          kind="dtype")
    fa, fb = _real_flat(a), _real_flat(b)
    n = fb.numel()
    scale = abs_max(fb)
    floor = max(scale, 1e-300) * 1e-12
    # per chunk: non-finite in a, elements outside tolerance, max abs err, max rel err, max (err - allowed)
    stats = torch.zeros((len(_chunks(n)), 5), dtype=torch.float64, device=fb.device)
    for j, i in enumerate(_chunks(n)):
        a64 = fa[i:i + CHUNK].to(torch.float64)
        b64 = fb[i:i + CHUNK].to(torch.float64)
        err = (a64 - b64).abs()
        excess = err - allowed_error(tol, scale, b64)
        stats[j, 0] = (~torch.isfinite(a64)).sum()
        stats[j, 1] = (excess > 0).sum()
        stats[j, 2] = torch.nan_to_num(err, nan=0.0, posinf=0.0).max()
        stats[j, 3] = torch.nan_to_num(err / b64.abs().clamp_min(floor), nan=0.0, posinf=0.0).max()
        stats[j, 4] = torch.nan_to_num(excess, nan=0.0, posinf=0.0).max()
    nonfinite, n_bad = (int(v) for v in stats[:, :2].sum(0).tolist())
    max_abs, max_rel = (float(v) for v in stats[:, 2:4].max(0).values.tolist())
    if nonfinite:
        return Comparison(False, f"{label}: {nonfinite} NaN/Inf values (NaN/Inf never pass)",
                          bad_fraction=nonfinite / n, kind="nonfinite")
    if n_bad:
        j = int(torch.argmax(stats[:, 4]))
        lo = j * CHUNK
        a64 = fa[lo:lo + CHUNK].to(torch.float64)
        b64 = fb[lo:lo + CHUNK].to(torch.float64)
        k = int(torch.argmax((a64 - b64).abs() - allowed_error(tol, scale, b64)))
        return Comparison(
            False,
            f"{label}: {n_bad} of {n} elements outside tolerance for {dtype_name(b.dtype)} "
            f"(rtol {tol.rtol:g}, atol {tol.atol:g} x max|ref| {scale:.3g}); worst at flat index {lo + k}: "
            f"got {float(a64[k]):.9g}, expected {float(b64[k]):.9g}; max abs err {max_abs:.3g}",
            max_abs, max_rel, n_bad / n, kind="mismatch",
        )
    return Comparison(True, "", max_abs, max_rel, 0.0)


def _nonfinite(t: torch.Tensor) -> int:
    flat = _real_flat(t)
    return sum(int((~torch.isfinite(flat[i:i + CHUNK])).sum()) for i in _chunks(flat.numel()))


def _against_oracle(a: torch.Tensor, b: torch.Tensor, oracle: torch.Tensor, proto: Protocol, label: str,
                    perturbed: Optional[Callable[[], Optional[torch.Tensor]]]) -> Comparison:
    bad = _nonfinite(a)
    if bad:
        return Comparison(False, f"{label}: {bad} NaN/Inf values (NaN/Inf never pass)", bad_fraction=bad / a.numel(),
                          kind="nonfinite")
    if _nonfinite(oracle):  # the float64 oracle overflowed where the float32 reference did not: judge by tolerance
        return compare_tensor(a, b, proto, label)
    ok, reason, numbers = accuracy.judge(a, b, oracle, proto.accuracy, label, perturbed)
    env = accuracy.envelope(a, b)
    numbers["envelope"] = float(f"{env:.4g}")
    if not ok and accuracy.gross(numbers):
        # not a question of accuracy: the answer is wrong (a few percent of the output's magnitude and more), and the
        # elementwise comparison with the reference says where, in its own words
        wrong = compare_tensor(a, b, proto, label)
        if not wrong.ok:
            return dataclasses.replace(wrong, details=numbers)
    return Comparison(ok, reason, max_rel_err=env, details=numbers, kind="" if ok else "accuracy")


def _sums(t: torch.Tensor) -> tuple[float, float]:
    s, a = float64_sums(t.reshape(-1), CHUNK).tolist()
    return s, a


def check_fingerprint(fp: dict, ref: torch.Tensor, proto: Protocol, floor: float = 0.0) -> Optional[str]:
    """Compare a sandbox fingerprint (sum, values at positions) with a golden tensor, on the golden's device.
    ``None`` if they agree. ``floor``: the least atol (relative to max|ref|) allowed, an accepted candidate's
    distance from the reference under the accuracy rule (gates/timed_outputs.py)."""
    if fp.get("numel", -1) != ref.numel():
        return f"output has {fp.get('numel')} elements, expected {ref.numel()}"
    if ref.numel() == 0:
        return None
    if ref.is_floating_point():
        tol = tolerance(proto, ref.dtype)
        atol, rtol = (max(tol.atol, floor), tol.rtol) if tol else (floor, 0.0)
    else:
        atol, rtol = 0.0, 0.0
    flat = ref.reshape(-1)
    idx = fp["index"].to(torch.int64)
    if idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= flat.numel()):
        return "fingerprint positions out of range"
    vals = fp["values"].to(torch.float64)
    expect = flat[idx.to(flat.device)].to(torch.float64).cpu()
    if not bool(torch.isfinite(vals).all()):
        return "NaN/Inf in a timed output"
    scale = abs_max(flat)
    allowed = allowed_error(Tolerance(rtol=rtol, atol=atol), scale, expect)
    if ref.is_floating_point():
        allowed = allowed + proto.accuracy.max_floor_ulps * ulp_spacing(expect, ref.dtype)
    bad = (vals - expect).abs() > allowed
    if bool(bad.any()):
        j = int(torch.nonzero(bad)[0])
        return (f"timed output differs from the golden output at flat index {int(idx[j])}: "
                f"{float(vals[j]):.9g} vs {float(expect[j]):.9g}")
    total, abs_total = _sums(ref)
    allowed_sum = flat.numel() * atol * scale + rtol * abs_total + 1e-12 * (scale + 1)
    if abs(float(fp["sum"]) - total) > allowed_sum:
        return f"timed output sums to {fp['sum']:.9g}, the golden output to {total:.9g}"
    return None
