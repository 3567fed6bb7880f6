"""Hypothesis-driven cheat probing: the candidate must match the reference on adversarial inputs too.

From the problem's own ``get_inputs()`` the probe derives recipes: the same shapes with adversarial values
(negatives, zeros, huge and tiny magnitudes, subnormals, mixed signs, spikes), non-contiguous layouts, and — where
the problem declares ``AUTOTUNE_SHAPE_RANGES`` — other shapes. A few explicit examples always run first (they
catch the classic cheats: an identity "ReLU" fails on all-negative inputs). Hypothesis draws the rest, seeded
from the run's nonce; a failure reports the hypothesis seed and the failing recipe, which replays exactly
(``--autotune-probe-seed``).

Inputs on which the reference itself is not finite are skipped: the probe tests the candidate, not the problem.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Optional, Sequence

import torch
from hypothesis import HealthCheck, Phase, assume, given, seed, settings
from hypothesis import strategies as st
from hypothesis.errors import Flaky, Unsatisfiable

from ..problems.inputs import LAYOUTS, PATTERNS
from ..problems.model import AA_CANDIDATE_NAME
from ..protocol import Protocol
from .base import CandidateFailure, Gate, GateContext, GateOutcome
from .compare import as_list, compare_outputs
from .probe_domain import bounded, max_magnitude

SCALES = (1e-3, 1.0, 1e3, 1e6, 1e12, 1e30)


class ProbeMismatch(AssertionError):
    def __init__(self, message: str, recipe: dict) -> None:
        super().__init__(message)
        self.recipe = recipe


def explicit_recipes(signature: list[dict], base_seed: int, layouts: Sequence[str] = LAYOUTS,
                     cap: Optional[float] = None) -> list[dict]:
    """Adversarial examples that always run: every float input negative, zero, huge, non-contiguous. ``layouts``:
    those the item's memory plan allows (a transposed input where it fits, else another that does); ``cap``: the
    domain's largest magnitude (gates/probe_domain.py)."""
    n = len(signature)

    def each(p: Optional[dict]) -> list:
        return [bounded(p, cap) if s.get("floating") else None for s in signature]

    strided = next((lay for lay in ("transpose", "stride", "offset") if lay in layouts), None)
    out = [
        {"seed": base_seed, "values": each({"name": "negative"})},
        {"seed": base_seed + 1, "values": each({"name": "alternating_sign"})},
        {"seed": base_seed + 2, "values": each({"name": "mixed_magnitude", "seed": 3})},
        {"seed": base_seed + 3, "layout": [strided if s.get("tensor") else None for s in signature]},
        {"seed": base_seed + 4, "values": each({"name": "large", "scale": 1e6})},
        {"seed": base_seed + 5, "values": each({"name": "zeros"})},
    ]
    if strided is None:
        del out[3]
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
              cap: Optional[float] = None) -> dict:
    """Run explicit recipes, then ``examples`` hypothesis-drawn ones. Raises :class:`ProbeMismatch`."""
    started = time.monotonic()
    ran = {"explicit": 0, "random": 0, "skipped": 0}
    for r in explicit_recipes(signature, probe_seed % (2**40), layouts, cap):
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
        layouts = tuple(ctx.memory.layouts) if ctx.memory.budgeted else LAYOUTS
        failures: list[ProbeMismatch] = []

        def check_one(recipe: dict) -> None:
            box: dict[str, Any] = {}

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
                err = ProbeMismatch(f"the candidate raised: {e}", recipe)
                failures.append(err)
                raise err from None
            if "skip" in box:
                raise _Skip(box["skip"])
            golden = box["golden"]
            if any(isinstance(g, torch.Tensor) and g.is_floating_point() and not bool(torch.isfinite(g).all())
                   for g in as_list(golden)):
                raise _Skip("reference not finite")
            if call.error:
                err = ProbeMismatch(call.error, recipe)
                failures.append(err)
                raise err
            cmp = compare_outputs(call.output, golden, p, "output")
            problems = [] if cmp.ok else [cmp.reason]
            if call.mutated_inputs:
                problems.append(f"modified input(s) {call.mutated_inputs}")
            if problems:
                err = ProbeMismatch("; ".join(problems), recipe)
                failures.append(err)
                raise err

        ranges = ctx.problem.shape_ranges if p.probes.shape_examples else {}
        summary: dict[str, Any] = {"seed": probe_seed}
        if cap is not None:
            summary["max_magnitude"] = cap
        if tuple(layouts) != LAYOUTS:
            summary["layouts"] = list(layouts)
        try:
            ran = run_probe(check_one, signature, {}, p.probes.max_examples, probe_seed, p.probes.deadline_s,
                            layouts, cap)
            summary.update(ran)
            if ranges:
                ran2 = run_probe(lambda r: check_one({**r, "values": None, "layout": None}), signature, ranges,
                                 p.probes.shape_examples, probe_seed ^ 0x5A5A, p.probes.deadline_s, layouts, cap)
                summary["shapes"] = ran2["random"]
        except ProbeMismatch as e:
            first = failures[0] if failures else e
            ctx.evidence.probes = {"status": "failed", **summary}
            return GateOutcome.refuse(
                "probe", f"{first} on adversarial input {describe_recipe(first.recipe)}; "
                f"replay with --autotune-probe-seed={probe_seed}",
                hypothesis_seed=probe_seed, recipe=first.recipe)
        ctx.evidence.probes = {"status": "passed", **summary}
        return None


def describe_recipe(recipe: dict) -> str:
    parts = [f"seed={recipe.get('seed')}"]
    vals = [v["name"] + (f"x{v['scale']:g}" if "scale" in v and v["name"] in ("large", "spikes", "constant") else "")
            for v in (recipe.get("values") or []) if v]
    if vals:
        parts.append("values=" + ",".join(vals))
    lay = [x for x in (recipe.get("layout") or []) if x and x != "contiguous"]
    if lay:
        parts.append("layout=" + ",".join(lay))
    if recipe.get("sizes"):
        parts.append("sizes=" + ",".join(f"{k}={v}" for k, v in recipe["sizes"].items()))
    return "{" + " ".join(parts) + "}"
