"""Output comparison by dtype-aware, output-scaled tolerance. Runs in the controller only.

Elementwise rule for floating outputs: ``|out - ref| <= atol * scale + rtol * |ref|`` with ``scale = max|ref|``
(so atol is relative to the output's magnitude, and a problem whose outputs are 1e6 is judged like one whose
outputs are 1). NaN or Inf in a candidate output never pass. Integer and bool outputs must match exactly.
Shape, dtype and structure must match.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import torch

from ..protocol import Protocol, Tolerance


@dataclass(frozen=True)
class Comparison:
    ok: bool
    reason: str = ""
    max_abs_err: float = 0.0
    max_rel_err: float = 0.0
    bad_fraction: float = 0.0
    details: dict = field(default_factory=dict)


def dtype_name(dt: torch.dtype) -> str:
    return str(dt).replace("torch.", "")


def tolerance(proto: Protocol, dt: torch.dtype) -> Optional[Tolerance]:
    return proto.tolerance_for(dtype_name(dt))


def as_list(out: Any) -> list:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in as_list(o)]
    return [out]


def compare_outputs(got: Any, ref: Any, proto: Protocol, where: str = "output") -> Comparison:
    g, r = as_list(got), as_list(ref)
    if len(g) != len(r):
        return Comparison(False, f"{where}: {len(g)} tensors returned, the reference returns {len(r)}")
    worst: Optional[Comparison] = None
    for i, (a, b) in enumerate(zip(g, r)):
        label = where if len(r) == 1 else f"{where}[{i}]"
        c = compare_tensor(a, b, proto, label)
        if not c.ok:
            return c
        if worst is None or c.max_rel_err > worst.max_rel_err:
            worst = c
    return worst or Comparison(True)


def compare_tensor(a: Any, b: torch.Tensor, proto: Protocol, label: str) -> Comparison:
    if not isinstance(a, torch.Tensor):
        return Comparison(False, f"{label}: got {type(a).__name__}, expected a tensor")
    if tuple(a.shape) != tuple(b.shape):
        return Comparison(False, f"{label}: shape {tuple(a.shape)} != reference {tuple(b.shape)}")
    if a.dtype != b.dtype:
        return Comparison(False, f"{label}: dtype {dtype_name(a.dtype)} != reference {dtype_name(b.dtype)}")
    if a.numel() == 0:
        return Comparison(True)
    if not (b.is_floating_point() or b.is_complex()):
        if torch.equal(a, b):
            return Comparison(True)
        n_bad = int((a != b).sum())
        return Comparison(False, f"{label}: {n_bad} of {b.numel()} elements differ (exact dtype {dtype_name(b.dtype)})",
                          bad_fraction=n_bad / b.numel())
    tol = tolerance(proto, b.dtype)
    if tol is None:
        return Comparison(False, f"{label}: no tolerance for dtype {dtype_name(b.dtype)} in the protocol")
    a64, b64 = a.to(torch.float64), b.to(torch.float64)
    if a.is_complex():
        a64, b64 = torch.view_as_real(a.to(torch.complex128)), torch.view_as_real(b.to(torch.complex128))
    nonfinite = ~torch.isfinite(a64)
    if bool(nonfinite.any()):
        n = int(nonfinite.sum())
        return Comparison(False, f"{label}: {n} NaN/Inf values (NaN/Inf never pass)", bad_fraction=n / a64.numel())
    scale = float(b64.abs().max())
    err = (a64 - b64).abs()
    allowed = tol.atol * scale + tol.rtol * b64.abs()
    bad = err > allowed
    max_abs = float(err.max())
    denom = b64.abs().clamp_min(max(scale, 1e-300) * 1e-12)
    max_rel = float((err / denom).max())
    if bool(bad.any()):
        n_bad = int(bad.sum())
        idx = int(torch.argmax((err - allowed).reshape(-1)))
        return Comparison(
            False,
            f"{label}: {n_bad} of {b.numel()} elements outside tolerance for {dtype_name(b.dtype)} "
            f"(rtol {tol.rtol:g}, atol {tol.atol:g} x max|ref| {scale:.3g}); worst at flat index {idx}: "
            f"got {float(a64.reshape(-1)[idx]):.9g}, expected {float(b64.reshape(-1)[idx]):.9g}; "
            f"max abs err {max_abs:.3g}",
            max_abs, max_rel, n_bad / b.numel(),
        )
    return Comparison(True, "", max_abs, max_rel, 0.0)


def check_fingerprint(fp: dict, ref: torch.Tensor, proto: Protocol) -> Optional[str]:
    """Compare a sandbox fingerprint (sum, |sum|, values at positions) with a golden tensor. ``None`` if ok."""
    if fp.get("numel", -1) != ref.numel():
        return f"output has {fp.get('numel')} elements, expected {ref.numel()}"
    if ref.numel() == 0:
        return None
    r64 = ref.reshape(-1).to(torch.float64)
    if ref.is_floating_point():
        tol = tolerance(proto, ref.dtype)
        atol, rtol = (tol.atol, tol.rtol) if tol else (0.0, 0.0)
    else:
        atol, rtol = 0.0, 0.0
    scale = float(r64.abs().max())
    idx = fp["index"].to(torch.int64)
    if idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= r64.numel()):
        return "fingerprint positions out of range"
    vals = fp["values"].to(torch.float64)
    expect = r64[idx]
    if not bool(torch.isfinite(vals).all()):
        return "NaN/Inf in a timed output"
    bad = (vals - expect).abs() > atol * scale + rtol * expect.abs()
    if bool(bad.any()):
        j = int(torch.nonzero(bad)[0])
        return (f"timed output differs from the golden output at flat index {int(idx[j])}: "
                f"{float(vals[j]):.9g} vs {float(expect[j]):.9g}")
    total = float(r64.sum())
    allowed_sum = r64.numel() * atol * scale + rtol * float(r64.abs().sum()) + 1e-12 * (scale + 1)
    if abs(float(fp["sum"]) - total) > allowed_sum:
        return f"timed output sums to {fp['sum']:.9g}, the golden output to {total:.9g}"
    return None
