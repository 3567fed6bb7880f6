"""Hypothesis-driven cheat probing: the candidate must match the reference on adversarial inputs too.

From the problem's own ``get_inputs()`` the probe derives recipes: the same shapes with adversarial values
(negatives, zeros, huge and tiny magnitudes, subnormals, mixed signs, spikes), non-contiguous layouts, and — where
the problem declares ``AUTOTUNE_SHAPE_RANGES`` — other shapes. A few explicit examples always run first (they
catch the classic cheats: an identity "ReLU" fails on all-negative inputs). Hypothesis draws the rest, seeded
from the run's nonce; a failure reports the hypothesis seed and the failing recipe, which replays exactly
(``--autotune-probe-seed``).

Inputs on which the reference itself is not finite are skipped: the probe tests the candidate, not the problem.

Each recipe tests one clause of the item's contract (problems/contract.py). Inside it a wrong answer refuses the item,
naming the clause and the fix; beyond it -- a layout the problem does not declare -- it is a **finding** on the item
(``details.findings``), unless the contract is strict (``[contract].beyond = "refuse"``, ``--autotune-strict-contract``).
Beyond-contract layouts run as explicit recipes, one each; the random recipes draw only layouts inside the contract.
Floating outputs are judged against the float64 oracle where the protocol says so (gates/accuracy.py).
"""

from __future__ import annotations

import time
from typing import Any, Callable, Optional, Sequence

import torch
from hypothesis import HealthCheck, Phase, assume, given, seed, settings
from hypothesis import strategies as st
from hypothesis.errors import Flaky, Unsatisfiable

from ..problems.contract import Clause, Contract, fix_for, layouts_for_probes
from ..problems.inputs import LAYOUTS, PATTERNS
from ..problems.model import AA_CANDIDATE_NAME
from ..protocol import Protocol
from .base import CandidateFailure, Gate, GateContext, GateOutcome
from .compare import as_list, compare_outputs
from .correctness import note_accuracy
from .probe_domain import bounded, max_magnitude

SCALES = (1e-3, 1.0, 1e3, 1e6, 1e12, 1e30)


class ProbeMismatch(AssertionError):
    def __init__(self, message: str, recipe: dict, clause: Optional[Clause] = None, kind: str = "mismatch") -> None:
        super().__init__(message)
        self.recipe = recipe
        self.clause = clause
        self.kind = kind


def explicit_recipes(signature: list[dict], base_seed: int, layouts: Sequence[str] = LAYOUTS,
                     cap: Optional[float] = None, beyond: Sequence[str] = ()) -> list[dict]:
    """Adversarial examples that always run: every float input negative, zero, huge, rounded the same way by every
    narrower type (``rounding_bias``: a half-precision shortcut cannot average it away), then one recipe per
    non-contiguous layout. ``layouts``: those inside the contract that the item's memory plan allows; ``beyond``:
    layouts beyond the contract that fit (each a finding where it fails); ``cap``: the domain's largest magnitude
    (gates/probe_domain.py)."""
    n = len(signature)

    def each(p: Optional[dict]) -> list:
        return [bounded(p, cap) if s.get("floating") else None for s in signature]

    def laid(lay: str) -> list:
        return [lay if s.get("tensor") else None for s in signature]

    strided = [lay for lay in ("transpose", "stride", "offset") if lay in layouts or lay in beyond]
    out = [
        {"seed": base_seed, "values": each({"name": "negative"})},
        {"seed": base_seed + 1, "values": each({"name": "alternating_sign"})},
        {"seed": base_seed + 2, "values": each({"name": "mixed_magnitude", "seed": 3})},
        {"seed": base_seed + 4, "values": each({"name": "large", "scale": 1e6})},
        {"seed": base_seed + 5, "values": each({"name": "zeros"})},
        {"seed": base_seed + 6, "values": each({"name": "rounding_bias", "scale": 1.0, "seed": 5})},
    ]
    out[3:3] = [{"seed": base_seed + 3 + 16 * j, "layout": laid(lay)} for j, lay in enumerate(strided)]
    return out if n else []


def recipe_strategy(signature: list[dict], shape_ranges: dict[str, tuple[int, int]],
                    layouts: Sequence[str] = LAYOUTS, cap: Optional[float] = None) -> st.SearchStrategy:
    pattern = st.one_of(
        st.none(),
        st.fixed_dictionaries({
            "name": st.sampled_from(PATTERNS),
            "scale": st.sampled_from(SCALES),
            "seed": st.integers(0, 2**31 - 1),
        }).map(lambda p: bounded(p, cap)),
    )
    values = st.tuples(*[pattern if s.get("floating") else st.none() for s in signature]).map(list)
    layout = st.tuples(*[st.sampled_from(tuple(layouts)) if s.get("tensor") else st.none()
                         for s in signature]).map(list)
    fields: dict[str, Any] = {"seed": st.integers(0, 2**62), "values": values, "layout": layout}
    if shape_ranges:
        fields["sizes"] = st.fixed_dictionaries({k: st.integers(lo, hi) for k, (lo, hi) in shape_ranges.items()})
    return st.fixed_dictionaries(fields)


def run_probe(check_one: Callable[[dict], None], signature: list[dict], shape_ranges: dict, examples: int,
              probe_seed: int, deadline_s: float, layouts: Sequence[str] = LAYOUTS,
              cap: Optional[float] = None, beyond: Sequence[str] = ()) -> dict:
    """Run explicit recipes (``beyond``: the layouts beyond the contract, one recipe each), then ``examples``
    hypothesis-drawn ones whose layouts are ``layouts``. Raises :class:`ProbeMismatch`."""
    started = time.monotonic()
    ran = {"explicit": 0, "random": 0, "skipped": 0}
    for r in explicit_recipes(signature, probe_seed % (2**40), layouts, cap, beyond):
        try:
            check_one(r)
            ran["explicit"] += 1
        except _Skip:
            ran["skipped"] += 1
    if examples <= 0:
        return ran

    @settings(max_examples=examples, database=None, deadline=None, derandomize=False,
              phases=(Phase.explicit, Phase.generate), suppress_health_check=list(HealthCheck), report_multiple_bugs=False)
    @seed(probe_seed)
    @given(recipe_strategy(signature, shape_ranges, layouts, cap))
    def probe(recipe: dict) -> None:
        if time.monotonic() - started > deadline_s:
            return
        try:
            check_one(recipe)
            ran["random"] += 1
        except _Skip:
            ran["skipped"] += 1
            assume(False)

    try:
        probe()
    except Unsatisfiable:
        pass
    except Flaky as e:
        # Hypothesis replays a failing example once before it reports it. A candidate whose answer changes from
        # call to call (uninitialised memory, a cache of repeated inputs, a clock) can pass the replay; Hypothesis
        # then calls the failure flaky. A wrong answer is wrong whether or not it comes back: refuse with it.
        mismatch = _first_mismatch(e)
        if mismatch is None:
            raise
        raise mismatch from None
    return ran


def _first_mismatch(error: BaseException) -> Optional[ProbeMismatch]:
    if isinstance(error, ProbeMismatch):
        return error
    for inner in getattr(error, "exceptions", ()):
        found = _first_mismatch(inner)
        if found is not None:
            return found
    return None


class _Skip(Exception):
    """The reference itself is not finite (or the input is out of the problem's domain) on this recipe."""


class ProbeGate(Gate):
    name = "probe"
    stages = ("probe",)

    def __init__(self, probe_seed_override: Optional[int] = None) -> None:
        self.probe_seed_override = probe_seed_override

    def check(self, ctx: GateContext, stage: str) -> Optional[GateOutcome]:
        p: Protocol = ctx.protocol
        if p.probes.max_examples == 0 and p.probes.shape_examples == 0:
            ctx.evidence.probes = {"status": "disabled"}
            return None
        if ctx.candidate.name == AA_CANDIDATE_NAME:  # the reference against itself: nothing to probe
            ctx.evidence.probes = {"status": "disabled", "reason": "A/A: the candidate is the reference"}
            return None
        if not ctx.memory.patterns:
            ctx.evidence.probes = {"status": "disabled", "reason": "; ".join(
                n for n in ctx.memory.notes if n.startswith("probes skipped")) or "memory"}
            ctx.warnings.append("probes disabled by the item's memory plan: an adversarial input set does not fit "
                                "the device beside the call (details.memory)")
            return None
        from ..problems.footprint import meta_signature

        signature = meta_signature(ctx.problem, ctx.sizes)
        if signature is None:  # get_inputs() does not run on meta tensors: a real set, built once
            from ..problems.inputs import inputs_signature
            from .correctness import ctx_inputs

            signature = inputs_signature(ctx_inputs(ctx, {"seed": ctx.seeds.seed("probe-signature")}))
        probe_seed = self.probe_seed_override if self.probe_seed_override is not None else ctx.seeds.seed("probe")
        cap = max_magnitude(p.probes.magnitudes, ctx.problem, signature)
        contract = ctx.contract or Contract(LAYOUTS, "protocol", tuple(ctx.problem.shape_ranges),
                                            ctx.problem.input_domain, "refuse")
        inside, beyond = layouts_for_probes(contract, tuple(ctx.memory.layouts) if ctx.memory.budgeted else LAYOUTS)
        failures: list[ProbeMismatch] = []
        findings: dict[str, dict] = {}

        def check_one(recipe: dict) -> None:
            box: dict[str, Any] = {}
            clause = contract.clause(recipe)

            def compute_golden() -> None:
                try:
                    box["golden"] = ctx.golden(recipe)
                except Exception as e:  # noqa: BLE001 - out of the problem's domain (e.g. shape not supported)
                    box["skip"] = str(e)

            try:  # the sandbox runs the candidate while the controller computes the golden output
                call = ctx.candidate_outputs([recipe], delay=0.0, meanwhile=compute_golden)[0]
            except CandidateFailure as e:
                if "skip" in box:
                    raise _Skip(box["skip"]) from None
                wrong(ProbeMismatch(f"the candidate raised: {e}", recipe, clause, "raised"))
                return
            if "skip" in box:
                raise _Skip(box["skip"])
            golden = box["golden"]
            if any(isinstance(g, torch.Tensor) and g.is_floating_point() and not bool(torch.isfinite(g).all())
                   for g in as_list(golden)):
                raise _Skip("reference not finite")
            if call.error:
                wrong(ProbeMismatch(call.error, recipe, clause, "structure"))
                return
            cmp = compare_outputs(call.output, golden, p, "output", ctx.oracle_outputs(recipe),
                                  ctx.oracle_perturbed(recipe))
            problems = [] if cmp.ok else [cmp.reason]
            if cmp.ok:
                note_accuracy(ctx, cmp)
            if call.mutated_inputs:
                problems.append(f"modified input(s) {call.mutated_inputs}")
            if problems:
                wrong(ProbeMismatch("; ".join(problems), recipe, clause, cmp.kind or "mutated"))

        def wrong(err: ProbeMismatch) -> None:
            """A wrong answer: a refusal inside the contract (or when it is strict), else a finding."""
            clause = err.clause
            assert clause is not None
            if clause.inside or contract.strict():
                failures.append(err)
                raise err
            findings.setdefault(clause.name, {
                "clause": clause.name, "input": describe_recipe(err.recipe), "what": str(err)[:500],
                "kind": err.kind, "fix": fix_for(clause, err.kind)})

        ranges = ctx.problem.shape_ranges if p.probes.shape_examples else {}
        summary: dict[str, Any] = {"seed": probe_seed, "layouts": list(inside)}
        if beyond:
            summary["beyond_contract_layouts"] = list(beyond)
        if cap is not None:
            summary["max_magnitude"] = cap
        try:
            ran = run_probe(check_one, signature, {}, p.probes.max_examples, probe_seed, p.probes.deadline_s,
                            inside, cap, beyond)
            summary.update(ran)
            if ranges:
                ran2 = run_probe(lambda r: check_one({**r, "values": None, "layout": None}), signature, ranges,
                                 p.probes.shape_examples, probe_seed ^ 0x5A5A, p.probes.deadline_s, inside, cap)
                summary["shapes"] = ran2["random"]
        except ProbeMismatch as e:
            first = failures[0] if failures else e
            ctx.evidence.probes = {"status": "failed", **summary}
            ctx.evidence.findings = list(findings.values())
            return GateOutcome.refuse("probe", probe_refusal(first, contract, probe_seed),
                                      hypothesis_seed=probe_seed, recipe=first.recipe,
                                      clause=first.clause.name if first.clause else None, kind=first.kind)
        if findings:
            summary["findings"] = len(findings)
        ctx.evidence.probes = {"status": "passed", **summary}
        ctx.evidence.findings = list(findings.values())
        return None


def probe_refusal(err: ProbeMismatch, contract: Contract, probe_seed: int) -> str:
    """A probe's refusal: the clause, what was wrong on which input, the fix, and how to replay it."""
    clause = err.clause
    where = "an adversarial input" if clause is None else clause.describe()
    strict = "" if clause is None or clause.inside else " (refused: the contract is strict)"
    fix = "" if clause is None else f"; fix: {fix_for(clause, err.kind)}"
    return (f"wrong on {where}{strict}: {err} on adversarial input {describe_recipe(err.recipe)}{fix}; "
            f"replay with --autotune-probe-seed={probe_seed}")


def describe_recipe(recipe: dict) -> str:
    parts = [f"seed={recipe.get('seed')}"]
    vals = [v["name"] + (f"x{v['scale']:g}" if "scale" in v and v["name"] in ("large", "spikes", "constant",
                                                                               "rounding_bias") else "")
            for v in (recipe.get("values") or []) if v]
    if vals:
        parts.append("values=" + ",".join(vals))
    lay = [x for x in (recipe.get("layout") or []) if x and x != "contiguous"]
    if lay:
        parts.append("layout=" + ",".join(lay))
    if recipe.get("sizes"):
        parts.append("sizes=" + ",".join(f"{k}={v}" for k, v in recipe["sizes"].items()))
    return "{" + " ".join(parts) + "}"
