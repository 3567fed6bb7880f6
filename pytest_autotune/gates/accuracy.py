"""Accuracy against a float64 oracle (``[accuracy].rule = "float64-oracle"``; docs/design/accuracy.md).

A fixed rtol against a float32 reference refuses a candidate that is *more* accurate than the reference wherever the
reference itself is off by more than rtol (a loss over constant inputs: reference 1.00048, candidate 1.00082, exact
1.0), and passes a half-precision shortcut wherever its errors average out below rtol (a scalar loss). So the
candidate is judged by its distance from the exact answer, measured against the reference's own distance on the same
inputs -- the rule of torch dynamo's ``same()`` (``rmse(res, fp64) <= m * rmse(ref, fp64) + floor``) and of
FlashAttention's tests (the worst element within 2x the reference's):

* ``rms(out - oracle) <= multiplier * rms(ref - oracle) + floor_ulps * U``, and
* ``max|out - oracle| <= max_multiplier * max|ref - oracle| + max_floor_ulps * U_max``,

``oracle`` being the reference run in float64 on the same (float32) inputs and parameters. The unit ``U`` is
``eps * rms(oracle)`` (``eps``: the output dtype's machine epsilon), ``U_max`` is ``eps * max|oracle|``; errors are
reported in these units ("ulp"). Where an output fails with that unit, the unit becomes what the op itself makes of
its inputs' rounding, if that is larger: the rms (and largest) change of the float64 oracle when every floating input
moves by up to one ulp of its dtype (``Oracle.perturbed``). An output that is zero in exact arithmetic (a layer norm
of a constant row, ``x - x.mean()``) has no magnitude of its own, yet any float32 algorithm is off by what its inputs'
rounding carries through the op; the perturbation measures that, and costs a float64 call only where needed.
A candidate at least as accurate as the reference always passes; a bfloat16, float16 or TF32 shortcut is thousands
of ulps off on any output it does not average away (measured: ``benchmarks/harness/accuracy_rule.py``).

Runs in the controller, on the device where the golden output lives, in float64 chunks (as gates/compare.py).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Callable, Optional

import torch

from ..protocol import AccuracySection
from ..sandbox.wire import dtype_name

#: elements per chunk of float64 temporaries (three of them: 384 MiB)
CHUNK = 1 << 24
#: the least unit an error is counted in, as a multiple of the output dtype's smallest normal number: where the oracle
#: is zero everywhere (a ReLU of negative inputs), a difference below float32's normal range is no error of substance
SMALLEST_UNIT = 1.0


@dataclass(frozen=True)
class OracleErrors:
    """One output's errors against its float64 oracle, in ulps of the oracle's magnitude."""

    n: int
    ulp: float  # the unit of the rms errors: eps * rms(oracle), or the input-rounding sensitivity if larger
    max_ulp: float  # the unit of the largest errors: eps * max|oracle|, or the sensitivity's largest if larger
    candidate_rms: float
    reference_rms: float
    candidate_max: float
    reference_max: float
    worst_index: int  # flat index of the candidate's largest error against the oracle
    unit: str = "eps x |oracle|"
    relative_rms: float = 0.0  # rms(out - oracle) / rms(oracle), whatever the unit (inf where the oracle is 0)
    wrong_fraction: float = 0.0  # share of elements off by more than a rounding error could make them (gross)

    def allowed(self, rule: AccuracySection) -> tuple[float, float]:
        """The most the rule allows (rms, max), in the same ulps."""
        return (rule.multiplier * self.reference_rms + rule.floor_ulps,
                rule.max_multiplier * self.reference_max + rule.max_floor_ulps)

    def passes(self, rule: AccuracySection) -> bool:
        rms_ok, max_ok = self.allowed(rule)
        return self.candidate_rms <= rms_ok and self.candidate_max <= max_ok

    def as_json(self, rule: AccuracySection) -> dict:
        rms_ok, max_ok = self.allowed(rule)
        return {"rule": "float64-oracle", "unit": self.unit, "relative_rms": _r(self.relative_rms),
                "wrong_fraction": _r(self.wrong_fraction),
                "rms_ulp": _r(self.candidate_rms),
                "reference_rms_ulp": _r(self.reference_rms), "allowed_rms_ulp": _r(rms_ok),
                "max_ulp": _r(self.candidate_max), "reference_max_ulp": _r(self.reference_max),
                "allowed_max_ulp": _r(max_ok)}

    def in_units(self, ulp: float, max_ulp: float, unit: str) -> "OracleErrors":
        """The same errors in other units (where the input-rounding sensitivity is the larger unit)."""
        a, b = self.ulp / ulp, self.max_ulp / max_ulp
        return OracleErrors(self.n, ulp, max_ulp, self.candidate_rms * a, self.reference_rms * a,
                            self.candidate_max * b, self.reference_max * b, self.worst_index, unit, self.relative_rms,
                            self.wrong_fraction)


def _r(x: float) -> float:
    return float(f"{x:.4g}") if math.isfinite(x) else x


def _flat(t: torch.Tensor) -> torch.Tensor:
    flat = t.reshape(-1)
    return torch.view_as_real(flat).reshape(-1) if flat.is_complex() else flat


def oracle_errors(out: torch.Tensor, ref: torch.Tensor, oracle: torch.Tensor) -> OracleErrors:
    """``out`` and ``ref`` (same shape and dtype, finite) against ``oracle`` (float64, same shape)."""
    fo, fr, fx = _flat(out), _flat(ref), _flat(oracle.to(ref.device))
    n = fr.numel()
    # per chunk: sum (out-o)^2, sum (ref-o)^2, sum o^2, max|out-o|, max|ref-o|, max|o|
    stats = torch.zeros((max(1, -(-n // CHUNK)), 6), dtype=torch.float64, device=fr.device)
    for j, i in enumerate(range(0, n, CHUNK)):
        o64 = fx[i:i + CHUNK].to(torch.float64)
        dc = fo[i:i + CHUNK].to(torch.float64) - o64
        dr = fr[i:i + CHUNK].to(torch.float64) - o64
        stats[j, 0] = dc.square().sum()
        stats[j, 1] = dr.square().sum()
        stats[j, 2] = o64.square().sum()
        stats[j, 3] = dc.abs().max()
        stats[j, 4] = dr.abs().max()
        stats[j, 5] = o64.abs().max()
    sq_c, sq_r, sq_o = (float(v) for v in stats[:, :3].sum(0).tolist())
    max_c, max_r, max_o = (float(v) for v in stats[:, 3:].max(0).values.tolist())
    finfo = torch.finfo(ref.dtype) if ref.is_floating_point() else torch.finfo(ref.real.dtype)
    eps, smallest = finfo.eps, finfo.tiny * SMALLEST_UNIT
    ulp = max(eps * math.sqrt(sq_o / max(n, 1)), smallest)
    max_ulp = max(eps * max_o, smallest)
    worst = int(torch.argmax(stats[:, 3])) * CHUNK
    lo = worst
    d = (fo[lo:lo + CHUNK].to(torch.float64) - fx[lo:lo + CHUNK].to(torch.float64)).abs()
    worst += int(torch.argmax(d))
    relative = math.sqrt(sq_c / sq_o) if sq_o > 0 else (0.0 if sq_c == 0 else math.inf)
    return OracleErrors(n, ulp, max_ulp, math.sqrt(sq_c / max(n, 1)) / ulp, math.sqrt(sq_r / max(n, 1)) / ulp,
                        max_c / max_ulp, max_r / max_ulp, worst, relative_rms=relative)


def sensitivity(oracle: torch.Tensor, perturbed: torch.Tensor) -> tuple[float, float]:
    """(rms, largest) change of the oracle's output when its inputs move by up to one ulp of their dtype."""
    fx, fp = _flat(oracle), _flat(perturbed.to(oracle.device))
    sq, worst = 0.0, 0.0
    for i in range(0, fx.numel(), CHUNK):
        d = fp[i:i + CHUNK].to(torch.float64) - fx[i:i + CHUNK].to(torch.float64)
        d = torch.nan_to_num(d, nan=0.0, posinf=0.0, neginf=0.0)
        sq += float(d.square().sum())
        worst = max(worst, float(d.abs().max()))
    return math.sqrt(sq / max(fx.numel(), 1)), worst


def judge(out: torch.Tensor, ref: torch.Tensor, oracle: torch.Tensor, rule: AccuracySection, label: str,
          perturbed: Optional[Callable[[], Optional[torch.Tensor]]] = None) -> tuple[bool, str, dict]:
    """(passed, the reason when not, the numbers for the report). ``perturbed``: the oracle's output on inputs moved
    by up to one ulp, asked for only where the output fails in the plain unit."""
    e = oracle_errors(out, ref, oracle)
    if not e.passes(rule):
        e = dataclasses.replace(e, wrong_fraction=wrong_fraction(out, oracle))
    if not e.passes(rule) and perturbed is not None:
        moved = perturbed()
        if moved is not None:
            rms_s, max_s = sensitivity(oracle, moved)
            if rms_s > e.ulp or max_s > e.max_ulp:
                e = e.in_units(max(e.ulp, rms_s), max(e.max_ulp, max_s), "input-rounding sensitivity")
    numbers = e.as_json(rule)
    if e.passes(rule):
        return True, "", numbers
    rms_ok, max_ok = e.allowed(rule)
    fo, fr, fx = _flat(out), _flat(ref), _flat(oracle)
    i = e.worst_index
    which = (f"rms error {e.candidate_rms:.3g} ulp against the reference's own {e.reference_rms:.3g} "
             f"(at most {rule.multiplier:g} x {e.reference_rms:.3g} + {rule.floor_ulps:g} = {rms_ok:.3g})"
             if e.candidate_rms > rms_ok else
             f"largest error {e.candidate_max:.3g} ulp against the reference's own {e.reference_max:.3g} "
             f"(at most {rule.max_multiplier:g} x {e.reference_max:.3g} + {rule.max_floor_ulps:g} = {max_ok:.3g})")
    ratio = (e.candidate_rms / e.reference_rms) if e.reference_rms > 0 else math.inf
    reason = (f"{label}: less accurate than the reference against the float64 oracle ({dtype_name(ref.dtype)}, "
              f"ulp = {e.unit}; {which}; {_times(ratio)}); worst at flat index {i}: got {float(fo[i]):.9g}, float64 "
              f"{float(fx[i]):.9g}, reference {float(fr[i]):.9g}")
    return False, reason, numbers


def _times(ratio: float) -> str:
    if math.isfinite(ratio):
        return f"{ratio:.3g}x the reference's rms error"
    # an op whose float64 result is degenerate too (log(1 + x) for |x| < 1e-16) has an oracle equal to the reference:
    # it cannot tell a better candidate from a worse one there (docs/design/accuracy.md, "Limits")
    return "the float64 oracle equals the reference to its last bit here"


#: an rms error above this share of the oracle's rms is a wrong answer, not an inaccurate one (a bfloat16 shortcut is
#: ~2^-9 off, four times less)
GROSS = 1.0 / 64
#: an element is wrong, not rounded, when it is off by more than 2^-5 of itself plus 2^-7 of the oracle's rms (a
#: bfloat16 value is off by at most 2^-8 of itself; a bfloat16 dot product by ~2^-9 of the output's rms)
WRONG_REL, WRONG_ABS = 2.0**-5, 2.0**-7
#: a share of wrong elements above this makes the output a wrong answer (a LeakyReLU for a ReLU: 1% off in rms)
WRONG_SHARE = 0.01


def wrong_fraction(out: torch.Tensor, oracle: torch.Tensor) -> float:
    """The share of ``out``'s elements off the oracle by more than a narrower type's rounding could make them."""
    fo, fx = _flat(out), _flat(oracle.to(out.device))
    n = fx.numel()
    sq = sum(float(fx[i:i + CHUNK].to(torch.float64).square().sum()) for i in range(0, n, CHUNK))
    floor = WRONG_ABS * math.sqrt(sq / max(n, 1))
    bad = 0
    for i in range(0, n, CHUNK):
        o64 = fx[i:i + CHUNK].to(torch.float64)
        bad += int(((fo[i:i + CHUNK].to(torch.float64) - o64).abs() > WRONG_REL * o64.abs() + floor).sum())
    return bad / max(n, 1)


def gross(numbers: dict) -> bool:
    """Whether a failed output is a wrong answer rather than an inaccurate one: its rms error at least :data:`GROSS`
    of the oracle's rms, or more than :data:`WRONG_SHARE` of its elements wrong."""
    return (float(numbers.get("relative_rms") or 0.0) >= GROSS
            or float(numbers.get("wrong_fraction") or 0.0) > WRONG_SHARE)


def envelope(out: torch.Tensor, ref: torch.Tensor) -> float:
    """``max|out - ref| / max|ref|``: how far an accepted candidate's output sits from the reference's, relative to
    the output's scale (the timed-outputs check allows it: gates/timed_outputs.py)."""
    fo, fr = _flat(out), _flat(ref)
    worst, scale = 0.0, 0.0
    for i in range(0, fr.numel(), CHUNK):
        a = fo[i:i + CHUNK].to(torch.float64)
        b = fr[i:i + CHUNK].to(torch.float64)
        worst = max(worst, float((a - b).abs().max()))
        scale = max(scale, float(b.abs().max()))
    return worst / scale if scale > 0 else 0.0


def applies(ref: torch.Tensor, rule: Optional[AccuracySection]) -> bool:
    """Whether the float64 oracle judges this output: a floating output below float64 under the oracle rule."""
    return (rule is not None and rule.rule == "float64-oracle" and (ref.is_floating_point() or ref.is_complex())
            and ref.dtype not in (torch.float64, torch.complex128))


__all__ = ["OracleErrors", "oracle_errors", "judge", "envelope", "applies"]
