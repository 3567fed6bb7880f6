"""Output comparison by dtype-aware, output-scaled tolerance. Runs in the controller only, on the device where the
golden output lives (a GPU's outputs never cross to the host: only a handful of scalars come back).

Elementwise rule for floating outputs: ``|out - ref| <= atol * scale + rtol * |ref|`` with ``scale = max|ref|``
(so atol is relative to the output's magnitude, and a problem whose outputs are 1e6 is judged like one whose
outputs are 1). NaN or Inf in a candidate output never pass. Integer and bool outputs must match exactly.
Shape, dtype and structure must match. The arithmetic is float64, over chunks of :data:`CHUNK` elements, so the
temporaries stay a bounded size whatever the output's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import torch

from ..protocol import Protocol, Tolerance
from ..sandbox.wire import dtype_name
from ..tree import abs_max, float64_sums
from ..tree import leaves as as_list

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


def tolerance(proto: Protocol, dt: torch.dtype) -> Optional[Tolerance]:
    return proto.tolerance_for(dtype_name(dt))


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


def _real_flat(t: torch.Tensor) -> torch.Tensor:
    flat = t.reshape(-1)
    return torch.view_as_real(flat).reshape(-1) if flat.is_complex() else flat


def _chunks(n: int) -> range:
    return range(0, n, CHUNK)


def compare_tensor(a: Any, b: torch.Tensor, proto: Protocol, label: str) -> Comparison:
    if not isinstance(a, torch.Tensor):
        return Comparison(False, f"{label}: got {type(a).__name__}, expected a tensor")
    if tuple(a.shape) != tuple(b.shape):
        return Comparison(False, f"{label}: shape {tuple(a.shape)} != reference {tuple(b.shape)}")
    if a.dtype != b.dtype:
        return Comparison(False, f"{label}: dtype {dtype_name(a.dtype)} != reference {dtype_name(b.dtype)}")
    if a.numel() == 0:
        return Comparison(True)
    if a.device != b.device:  # a host-copy fallback: judge where the golden output lives
        a = a.to(b.device)
    if not (b.is_floating_point() or b.is_complex()):
        if torch.equal(a, b):
            return Comparison(True)
        n_bad = int((a != b).sum())
        return Comparison(False, f"{label}: {n_bad} of {b.numel()} elements differ (exact dtype {dtype_name(b.dtype)})",
                          bad_fraction=n_bad / b.numel())
    tol = tolerance(proto, b.dtype)
    if tol is None:
        return Comparison(False, f"{label}: no tolerance for dtype {dtype_name(b.dtype)} in the protocol")
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
        allowed = tol.atol * scale + tol.rtol * b64.abs()
        excess = err - allowed
        stats[j, 0] = (~torch.isfinite(a64)).sum()
        stats[j, 1] = (excess > 0).sum()
        stats[j, 2] = torch.nan_to_num(err, nan=0.0, posinf=0.0).max()
        stats[j, 3] = torch.nan_to_num(err / b64.abs().clamp_min(floor), nan=0.0, posinf=0.0).max()
        stats[j, 4] = torch.nan_to_num(excess, nan=0.0, posinf=0.0).max()
    nonfinite, n_bad = (int(v) for v in stats[:, :2].sum(0).tolist())
    max_abs, max_rel = (float(v) for v in stats[:, 2:4].max(0).values.tolist())
    if nonfinite:
        return Comparison(False, f"{label}: {nonfinite} NaN/Inf values (NaN/Inf never pass)",
                          bad_fraction=nonfinite / n)
    if n_bad:
        j = int(torch.argmax(stats[:, 4]))
        lo = j * CHUNK
        a64 = fa[lo:lo + CHUNK].to(torch.float64)
        b64 = fb[lo:lo + CHUNK].to(torch.float64)
        k = int(torch.argmax((a64 - b64).abs() - (tol.atol * scale + tol.rtol * b64.abs())))
        return Comparison(
            False,
            f"{label}: {n_bad} of {n} elements outside tolerance for {dtype_name(b.dtype)} "
            f"(rtol {tol.rtol:g}, atol {tol.atol:g} x max|ref| {scale:.3g}); worst at flat index {lo + k}: "
            f"got {float(a64[k]):.9g}, expected {float(b64[k]):.9g}; max abs err {max_abs:.3g}",
            max_abs, max_rel, n_bad / n,
        )
    return Comparison(True, "", max_abs, max_rel, 0.0)


def _sums(t: torch.Tensor) -> tuple[float, float]:
    s, a = float64_sums(t.reshape(-1), CHUNK).tolist()
    return s, a


def check_fingerprint(fp: dict, ref: torch.Tensor, proto: Protocol) -> Optional[str]:
    """Compare a sandbox fingerprint (sum, values at positions) with a golden tensor, on the golden's device.
    ``None`` if they agree."""
    if fp.get("numel", -1) != ref.numel():
        return f"output has {fp.get('numel')} elements, expected {ref.numel()}"
    if ref.numel() == 0:
        return None
    if ref.is_floating_point():
        tol = tolerance(proto, ref.dtype)
        atol, rtol = (tol.atol, tol.rtol) if tol else (0.0, 0.0)
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
    bad = (vals - expect).abs() > atol * scale + rtol * expect.abs()
    if bool(bad.any()):
        j = int(torch.nonzero(bad)[0])
        return (f"timed output differs from the golden output at flat index {int(idx[j])}: "
                f"{float(vals[j]):.9g} vs {float(expect[j]):.9g}")
    total, abs_total = _sums(ref)
    allowed_sum = flat.numel() * atol * scale + rtol * abs_total + 1e-12 * (scale + 1)
    if abs(float(fp["sum"]) - total) > allowed_sum:
        return f"timed output sums to {fp['sum']:.9g}, the golden output to {total:.9g}"
    return None
