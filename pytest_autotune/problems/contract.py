"""The contract a candidate is judged by: which inputs it must answer for (docs/guide/contract.md).

A problem may declare each clause in its file; a KernelBench file that declares none gets what its ``get_inputs()``
produces:

* **layouts** -- ``AUTOTUNE_LAYOUTS = ("contiguous", "transpose")`` (or ``"any"``): the memory layouts its inputs may
  come in, beside the ones ``get_inputs()`` produces. Undeclared: ``[contract].undeclared_layouts`` -- under protocol 10
  ``"as-produced"``, no other layout (no KernelBench problem hands a candidate a transposed tensor);
* **shapes** -- ``AUTOTUNE_SHAPE_RANGES``: other sizes the candidate must handle. Undeclared: ``get_inputs()``'s own;
* **values** -- ``AUTOTUNE_INPUT_DOMAIN`` ("nonnegative", "positive"), else every finite value of the dtype the probes'
  magnitudes reach (``[probes].magnitudes``: gates/probe_domain.py).

Inside the contract every gate refuses a wrong answer. Beyond it (a layout the problem does not declare) the probes
still run and what they find is a **finding** on the item -- in the terminal, the JSON report and the store --
which refuses only under ``[contract].beyond = "refuse"`` or ``--autotune-strict-contract``. Every refusal and every
finding names its clause and a fix (:func:`fix_for`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

from ..errors import ProblemLoadError
from .inputs import LAYOUTS
from .loader import LoadedProblem

#: the clause of the correctness gate's inputs: exactly what ``get_inputs()`` produces, from the run's seeds
DECLARED_INPUTS = "declared inputs"


@dataclass(frozen=True)
class Clause:
    """One clause of a contract: ``name`` as reports print it, ``inside`` the contract or beyond it."""

    name: str
    inside: bool
    layout: Optional[str] = None
    values: tuple[str, ...] = ()  # the value patterns the clause's inputs follow (problems/inputs.py PATTERNS)

    def describe(self) -> str:
        return self.name if self.inside else f"{self.name} (beyond the contract)"


@dataclass(frozen=True)
class Contract:
    layouts: tuple[str, ...]  # layouts inside the contract ("contiguous": as get_inputs() produces them)
    layouts_from: str  # who says so: "AUTOTUNE_LAYOUTS", "get_inputs()" or "protocol"
    shapes: tuple[str, ...]  # size globals whose ranges are declared (AUTOTUNE_SHAPE_RANGES)
    domain: Optional[str]  # AUTOTUNE_INPUT_DOMAIN, or None: every finite value the probes reach
    beyond: str  # "finding" | "refuse"

    @property
    def beyond_layouts(self) -> tuple[str, ...]:
        return tuple(lay for lay in LAYOUTS if lay not in self.layouts)

    def strict(self) -> bool:
        return self.beyond == "refuse"

    def clause(self, recipe: dict) -> Clause:
        """The clause a recipe tests: the first layout beyond the contract it uses, else the values, shapes or
        layouts it declares, else the declared inputs themselves."""
        layouts = [lay for lay in (recipe.get("layout") or []) if lay and lay != "contiguous"]
        for lay in layouts:
            if lay not in self.layouts:
                return Clause(f"layout {lay}", False, lay)
        parts = []
        values = [v.get("name") for v in (recipe.get("values") or []) if v]
        if values:
            parts.append("values " + ",".join(sorted(set(str(v) for v in values))))
        if recipe.get("sizes"):
            parts.append("shapes " + ",".join(f"{k}={v}" for k, v in recipe["sizes"].items()))
        if layouts:
            parts.append("layout " + ",".join(sorted(set(layouts))))
        return Clause("declared " + "; ".join(parts) if parts else DECLARED_INPUTS, True,
                      values=tuple(sorted(set(str(v) for v in values) - {"as_is"})))

    def as_json(self) -> dict:
        return {"layouts": list(self.layouts), "layouts_from": self.layouts_from, "beyond_layouts":
                list(self.beyond_layouts), "shapes": list(self.shapes), "domain": self.domain or "finite",
                "beyond": self.beyond}


def declared_layouts(problem: LoadedProblem) -> Optional[tuple[str, ...]]:
    """``AUTOTUNE_LAYOUTS`` of the problem file, validated; None where it declares none."""
    raw: Any = getattr(problem.module, "AUTOTUNE_LAYOUTS", None)
    if raw is None:
        return None
    if raw == "any":
        return LAYOUTS
    names = (raw,) if isinstance(raw, str) else raw
    if not isinstance(names, (list, tuple)) or not all(isinstance(n, str) for n in names):
        raise ProblemLoadError(str(problem.src.path), f"AUTOTUNE_LAYOUTS = {raw!r}: give \"any\" or a tuple of layout "
                               f"names from {', '.join(LAYOUTS)}")
    unknown = [n for n in names if n not in LAYOUTS]
    if unknown:
        raise ProblemLoadError(str(problem.src.path), f"AUTOTUNE_LAYOUTS names unknown layout {unknown[0]!r}; use "
                               f"{', '.join(LAYOUTS)} (or \"any\")")
    return tuple(lay for lay in LAYOUTS if lay in names or lay == "contiguous")


def contract_for(problem: LoadedProblem, undeclared_layouts: str, beyond: str) -> Contract:
    """The problem's contract under the protocol's ``[contract]`` (``beyond`` after ``--autotune-strict-contract``)."""
    declared = declared_layouts(problem)
    if declared is not None:
        layouts, source = declared, "AUTOTUNE_LAYOUTS"
    elif undeclared_layouts == "all":
        layouts, source = LAYOUTS, "protocol"
    else:
        layouts, source = ("contiguous",), "get_inputs()"
    return Contract(layouts, source, tuple(problem.shape_ranges), problem.input_domain, beyond)


#: what to do about a wrong answer, by what went wrong (gates/compare.py ``Comparison.kind``)
FIXES = {
    "accuracy": "compute in the output's dtype with float32 (or wider) accumulation -- no bfloat16/float16 casts, "
                "TF32 off -- and add long reductions in blocks or a tree, not one running float32 total",
    "nonfinite": "the kernel returns NaN/Inf where the reference is finite: subtract the row maximum before exp, "
                 "guard divisions, accumulate in float32",
    "shape": "return the reference's shape (check the output's allocation and the problem's sizes)",
    "dtype": "return the reference's dtype (allocate the output with torch.empty_like on the input)",
    "exact": "integer and bool outputs must equal the reference's exactly: check ties and index arithmetic",
    "mismatch": "check indexing and the boundary (the tail when a size is not a multiple of the block), and that the "
                "kernel reads every input it is given",
    "mutated": "do not write to the inputs: allocate the output (torch.empty_like) and write there",
    "raised": "the candidate raised on this input: it must accept every input the clause allows",
    "structure": "return as many tensors as the reference, in its structure",
}

#: what a wrong answer on a value pattern usually comes from (problems/inputs.py PATTERNS): named instead of the
#: indexing hint where the clause's inputs follow a pattern (an H100 run, 2026-12-06: a SELU computing exp(x) - 1
#: returned 0 on randn x 1e-30 inputs, where expm1 keeps -1.76e-30, and was told to check its indexing)
VALUE_FIXES = {
    "tiny": "the answer is lost at tiny magnitudes (exp(x) - 1 where expm1(x) keeps it, an absolute epsilon, a "
            "flush to zero): use a form whose relative error holds at every scale",
    "subnormal": "subnormal inputs are flushed or mishandled (fast math's flush-to-zero, an absolute epsilon): "
                 "keep them as the reference does",
    "large": "large magnitudes overflow or lose precision in an intermediate (x * x, exp(x), a long sum): rescale "
             "first, subtract the maximum before exp, accumulate in float32 in blocks",
    "constant": "equal large values overflow or cancel in an intermediate (a sum of squares, a variance by "
                "E[x^2] - E[x]^2): rescale first, use a two-pass or Welford variance, accumulate in blocks",
    "mixed_magnitude": "values across twelve orders of magnitude: small terms are lost beside large ones or an "
                       "intermediate overflows: accumulate in blocks or a tree, rescale before squaring",
    "negative": "wrong on negative inputs: check the branch for x < 0 (its formula, the boundary at 0, abs and "
                "sign); a sum of same-sign values grows, and one running float32 total loses it",
    "nonnegative": "wrong on nonnegative inputs: check the branch for x >= 0 and the boundary at 0; a sum of "
                   "same-sign values grows, and one running float32 total loses it",
    "alternating_sign": "wrong on inputs of alternating sign: check cancellation in sums (accumulate in blocks "
                        "or a tree) and the branches for each sign",
    "zeros": "wrong on all-zero inputs: check divisions by a norm or variance that is zero (the reference's eps) "
             "and ties",
    "ones": "wrong on all-equal inputs: check ties (max, argmax, sort) and a variance that is zero",
    "spikes": "wrong on sparse spikes (1% large, the rest zero): check reductions' accuracy and ties",
    "rounding_bias": "a narrower type's rounding shows (bfloat16/float16 casts, TF32): compute in float32 or wider",
}

LAYOUT_FIX = ("the kernel assumes contiguous memory: call .contiguous() on every input before data_ptr() (or "
              "index with the input's strides)")


def fix_for(clause: Clause, kind: str) -> str:
    """The fix a refusal or a finding names."""
    if clause.layout is not None or (kind == "mismatch" and "layout" in clause.name):
        return LAYOUT_FIX + ("" if clause.inside else "; or, if the problem's inputs are always contiguous, keep "
                             "it: this is a finding, not a refusal, unless the run is strict")
    hints = [VALUE_FIXES[v] for v in clause.values if v in VALUE_FIXES]
    if kind == "mismatch" and hints:
        return "; ".join(hints)
    if kind == "accuracy" and hints:  # the values say where; the accuracy fix says how (unless it is the same)
        return "; ".join(hints + ([] if clause.values == ("rounding_bias",) else [FIXES["accuracy"]]))
    return FIXES.get(kind, FIXES["mismatch"])


def layouts_for_probes(contract: Contract, fit: Sequence[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(layouts inside the contract, layouts beyond it) that the item's memory plan lets the probes build."""
    inside = tuple(lay for lay in contract.layouts if lay in fit)
    beyond = tuple(lay for lay in contract.beyond_layouts if lay in fit)
    return inside or ("contiguous",), beyond


#: what the store's ``contract`` column holds beside the contract itself (store/migrations/m0006_contract.py)
RECORDED = ("findings", "accuracy", "kernelbench", "clause")


def contract_record(details: dict) -> Optional[dict]:
    """The ``contract`` column of an item's row, from its report details: the contract, its findings, the accuracy
    rule's numbers, KernelBench's verdict and, for a refusal, the clause; None where the item has none of them."""
    if not details.get("contract") and not any(details.get(k) for k in RECORDED):
        return None
    record = dict(details.get("contract") or {})
    record.update({k: details[k] for k in RECORDED if details.get(k) not in (None, [], {})})
    record.setdefault("findings", [])
    return record


__all__ = ["contract_record", "RECORDED", "Clause", "Contract", "DECLARED_INPUTS", "contract_for", "declared_layouts", "fix_for",
           "layouts_for_probes", "FIXES", "LAYOUT_FIX", "VALUE_FIXES"]
