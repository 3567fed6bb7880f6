"""The correctness gate: before anything is timed, the candidate must reproduce the golden outputs.

Golden outputs come from the reference, computed in the controller on inputs built from the run's paired seeds
(``[seeds].count`` of them). The sandbox only ever sees the seeds. A candidate fails when an output is not a plain
tensor (a subclass, a lazy or meta tensor: it could run code when read), differs beyond the dtype's tolerance, has
NaN/Inf, the wrong shape, dtype or device, when it modified an input, when its output changed after the call
returned, or when it left threads running.

Floating outputs are judged against the reference's float64 oracle where the protocol says so (gates/accuracy.py):
a candidate more accurate than the reference passes, a lower-precision shortcut does not. Every refusal names the
clause of the contract it broke -- here always the declared inputs, ``get_inputs()`` as the problem makes them
(problems/contract.py) -- and the fix.
"""

from __future__ import annotations

import functools
from typing import Any, Optional

import torch

from ..problems.contract import DECLARED_INPUTS, Clause, fix_for
from .base import Gate, GateContext, GateOutcome
from .compare import Comparison, as_list, compare_outputs

#: the timed-outputs check allows an accepted candidate at most this far from the reference (relative to max|ref|),
#: whatever its distance under the accuracy rule (derived input sets differ by ~6-12%: measure/input_sets.py)
MAX_ENVELOPE = 1e-2


def refusal(reason: str, clause: Clause, kind: str) -> str:
    """A refusal's text: what was wrong, the clause, and the fix."""
    return f"{reason} -- clause: {clause.describe()}; fix: {fix_for(clause, kind)}"


def note_accuracy(ctx: GateContext, cmp: Comparison) -> None:
    """Keep the worst accuracy numbers of an accepted comparison on the item (``details.accuracy``)."""
    acc = ctx.evidence.accuracy = ctx.evidence.accuracy or {"rule": ctx.protocol.accuracy.rule}
    for numbers in cmp.details.values():
        if not isinstance(numbers, dict) or "rms_ulp" not in numbers:
            continue
        acc.setdefault("oracle", "float64")
        for key in ("rms_ulp", "max_ulp", "reference_rms_ulp", "reference_max_ulp", "envelope"):
            if key in numbers:
                acc[f"worst_{key}"] = max(float(acc.get(f"worst_{key}", 0.0)), float(numbers[key]))


def expected_location(ctx: GateContext) -> str:
    return "mlx" if ctx.device.framework == "mlx" else ctx.device.name


class CorrectnessGate(Gate):
    name = "correctness"
    stages = ("correctness",)

    def check(self, ctx: GateContext, stage: str) -> Optional[GateOutcome]:
        seeds = ctx.seeds.seeds("correctness", ctx.protocol.seeds.count)
        recipes = [{"seed": s} for s in seeds]
        clause = Clause(DECLARED_INPUTS, True)
        worst = envelope = 0.0
        for recipe in recipes:
            # one input per request: the candidate's output stays alive in its sandbox until the next request
            call = ctx.candidate_outputs([recipe], meanwhile=functools.partial(ctx.golden, recipe))[0]
            where = f"seed {recipe['seed']}"
            if call.error:
                kind = "raised" if "raised" in call.error else "structure"
                return GateOutcome.refuse("correctness", refusal(f"{where}: {call.error}", clause, kind),
                                          output_type=call.output_type, clause=clause.name)
            golden = ctx.golden(recipe)
            if call.location != expected_location(ctx):
                return GateOutcome.refuse(
                    "correctness", f"{where}: output is on {call.location!r}, expected {expected_location(ctx)!r}")
            cmp = compare_outputs(call.output, golden, ctx.protocol, where, ctx.oracle_outputs(recipe),
                                  ctx.oracle_perturbed(recipe))
            if not cmp.ok:
                return GateOutcome.refuse("correctness", refusal(cmp.reason, clause, cmp.kind),
                                          max_abs_err=cmp.max_abs_err, clause=clause.name, kind=cmp.kind,
                                          accuracy=cmp.details or None)
            note_accuracy(ctx, cmp)
            worst = max(worst, cmp.max_rel_err)
            envelope = max(envelope, *(float(d.get("envelope", 0.0)) for d in cmp.details.values()
                                       if isinstance(d, dict)), 0.0)
            if call.mutated_inputs:
                return GateOutcome.refuse(
                    "correctness", refusal(f"{where}: the candidate modified its input(s) {call.mutated_inputs} "
                                           "(inputs must be unchanged after the call)", clause, "mutated"))
            if call.changed_after_return:
                return GateOutcome.refuse(
                    "integrity", f"{where}: the output changed after the call returned "
                    f"(re-read after {ctx.protocol.correctness.recheck_delay_s:g} s): work was still running "
                    "after return (threads or side streams)")
            if call.new_threads > ctx.protocol.integrity.max_new_threads:
                return GateOutcome.refuse(
                    "integrity", f"{where}: {call.new_threads} new thread(s) still running after the call returned")
            # this recipe's golden output and copy of the candidate's go before the next recipe's are made: the
            # item's memory plan counts one of each (measure/memory.py)
            del call, golden
        ctx.evidence.max_rel_err = worst
        if envelope > 0.0:
            assert ctx.evidence.accuracy is not None
            ctx.evidence.accuracy["timed_outputs_floor"] = min(2.0 * envelope, MAX_ENVELOPE)
        ctx.warnings.extend(weak_problem_warnings(ctx, recipes[0]))
        return None


def timed_outputs_floor(ctx: GateContext) -> float:
    """The least atol (relative to max|ref|) timed outputs are checked with: twice the farthest an accepted
    candidate's correctness outputs sat from the reference's, at most :data:`MAX_ENVELOPE` (0: the protocol's
    tolerance alone)."""
    return float((ctx.evidence.accuracy or {}).get("timed_outputs_floor", 0.0))


def weak_problem_warnings(ctx: GateContext, recipe: dict) -> list[str]:
    """A reference whose outputs are (near) constant, or equal to an input, cannot tell a cheat from an honest
    kernel by outputs alone: flag it so the problem gets fixed (the probes and the breaker still apply)."""
    out: list[str] = []
    golden = as_list(ctx.golden(recipe))
    spread_tol = ctx.protocol.correctness.near_constant_rel_spread
    for i, g in enumerate(golden):
        if not isinstance(g, torch.Tensor) or g.numel() < 2 or not g.is_floating_point():
            continue
        lo, hi = (float(v) for v in torch.stack(list(torch.aminmax(g))).to(torch.float64).tolist())
        scale, spread = max(abs(lo), abs(hi)), hi - lo  # no full-size |g| temporary (published sizes: GBs)
        if spread <= spread_tol * max(scale, 1e-300):
            out.append(f"weak problem: reference output {i} is constant ({lo:.6g}) on "
                       "the paired seeds' inputs; a constant-returning candidate passes correctness")
    inputs = ctx_inputs(ctx, recipe)
    for i, g in enumerate(golden):
        for j, x in enumerate(inputs):
            if isinstance(x, torch.Tensor) and isinstance(g, torch.Tensor) and x.shape == g.shape \
                    and x.dtype == g.dtype and torch.equal(x.to(g.device), g):
                out.append(f"weak problem: reference output {i} equals input {j} on the paired seeds' inputs "
                           "(the op is the identity there); an identity candidate passes correctness")
    return out


def ctx_inputs(ctx: GateContext, recipe: dict) -> list[Any]:
    """The recipe's inputs as the golden outputs were computed from them (on the device)."""
    golden = ctx.golden
    if hasattr(golden, "inputs"):
        return golden.inputs(recipe)
    from ..problems.inputs import materialize

    r = dict(recipe)
    r["sizes"] = {**ctx.sizes, **(recipe.get("sizes") or {})}
    return materialize(ctx.problem, r)
