"""KernelBench's own verdict, recorded beside the gates' (``[kernelbench]``; docs/guide/contract.md).

KernelBench (``src/kernelbench/eval.py``, ``run_and_check_correctness``) seeds torch with 42, draws its trials' seeds
with ``torch.randint(0, 2**32 - 1, (1,))``, and for each trial seeds torch, calls ``get_inputs()`` and requires
``torch.allclose(ref_out, new_out, atol=t, rtol=t)`` with t = 1e-4 for float32 and 1e-2 for float16/bfloat16 (1e-2
for every dtype in its v0 and v0.1, when the public leaderboard's kernels were checked); a shape mismatch or an
exception fails the kernel at once. This gate asks the candidate's sandbox for the same trials and applies the same
test to the golden outputs, so a report can read "KernelBench: correct; here: refused by <clause> because <why>".

It never refuses: KernelBench's seeds are fixed and public, so a candidate can precompute its answers to them, and
its inputs are contiguous draws of one shape. The inputs are drawn where the item draws its own (on a GPU, on the
GPU), from KernelBench's seeds; the models are the item's (built from the run's init seed, not from 42).
"""

from __future__ import annotations

import functools
from typing import Any, Optional

import torch

from ..problems.model import AA_CANDIDATE_NAME
from ..sandbox.wire import dtype_name
from .base import CandidateFailure, CandidateRefusal, Gate, GateContext, GateOutcome
from .compare import CHUNK, as_list

_HALF = (torch.float16, torch.bfloat16)


def trial_seeds(seed: int, trials: int) -> list[int]:
    """KernelBench's ``correctness_trial_seeds``: ``torch.manual_seed(seed)`` then ``trials`` draws of
    ``torch.randint(0, 2**32 - 1, (1,))`` (a generator of its own here, whose stream is the global one's)."""
    g = torch.Generator().manual_seed(seed)
    return [int(torch.randint(0, 2**32 - 1, (1,), generator=g).item()) for _ in range(trials)]


def allclose(ref: torch.Tensor, out: torch.Tensor, tol: float) -> tuple[bool, float]:
    """``torch.allclose(ref, out, atol=tol, rtol=tol)`` (``|ref - out| <= tol + tol * |out|``, NaN never close) in
    float64 chunks on the golden output's device, and the largest difference."""
    fr, fo = ref.reshape(-1), out.to(ref.device).reshape(-1)
    ok, worst = True, 0.0
    for i in range(0, fr.numel(), CHUNK):
        r = fr[i:i + CHUNK].to(torch.float64)
        o = fo[i:i + CHUNK].to(torch.float64)
        d = (r - o).abs()
        if not bool(torch.isfinite(d).all()):
            return False, float("nan")
        worst = max(worst, float(d.max()))
        ok = ok and bool((d <= tol + tol * o.abs()).all())
    return ok, worst


def tolerance_for(dtype: torch.dtype, kb: Any) -> float:
    return kb.half_tolerance if dtype in _HALF else kb.float32_tolerance


def judge_trial(out: Any, golden: Any, kb: Any) -> dict:
    """One trial's verdict at KernelBench's tolerance and at its v0 tolerance."""
    got, ref = as_list(out), as_list(golden)
    if len(got) != len(ref):
        return {"verdict": "runtime error", "why": f"{len(got)} outputs, the reference has {len(ref)}"}
    worst = 0.0
    passed, passed_v0 = True, True
    for g, r in zip(got, ref):
        if not isinstance(g, torch.Tensor) or not isinstance(r, torch.Tensor):
            return {"verdict": "runtime error", "why": "an output is not a tensor"}
        if tuple(g.shape) != tuple(r.shape):
            return {"verdict": "incorrect", "why": f"output shape mismatch: expected {tuple(r.shape)}, got "
                                                   f"{tuple(g.shape)}"}
        if g.dtype != r.dtype:  # torch.allclose raises on mixed dtypes: KernelBench's "runtime error"
            return {"verdict": "runtime error", "why": f"dtype {dtype_name(g.dtype)} != {dtype_name(r.dtype)}"}
        if not r.is_floating_point():
            same = bool(torch.equal(g.to(r.device), r))
            passed, passed_v0 = passed and same, passed_v0 and same
            continue
        ok, d = allclose(r, g, tolerance_for(r.dtype, kb))
        ok0, _ = allclose(r, g, kb.v0_tolerance)
        passed, passed_v0, worst = passed and ok, passed_v0 and ok0, max(worst, d)
    return {"verdict": "correct" if passed else "incorrect", "v0": "correct" if passed_v0 else "incorrect",
            "max_difference": worst}


class KernelBenchVerdictGate(Gate):
    """Records ``details.kernelbench``; never refuses."""

    name = "kernelbench"
    stages = ("correctness",)

    def check(self, ctx: GateContext, stage: str) -> Optional[GateOutcome]:
        kb = ctx.protocol.kernelbench
        if kb.trials == 0 or ctx.candidate.name == AA_CANDIDATE_NAME:
            return None
        seeds = trial_seeds(kb.seed, kb.trials)
        record: dict = {"trials": kb.trials, "seed": kb.seed, "tolerance": kb.float32_tolerance,
                        "half_tolerance": kb.half_tolerance, "v0_tolerance": kb.v0_tolerance, "passed": 0,
                        "passed_v0": 0, "max_difference": [], "inputs": "KernelBench's trial seeds, drawn where the "
                        "item draws its inputs"}
        verdict = "correct"
        for s in seeds:
            recipe = {"seed": s}
            try:
                call = ctx.candidate_outputs([recipe], meanwhile=functools.partial(ctx.golden, recipe))[0]
            except (CandidateFailure, CandidateRefusal) as e:
                verdict, record["why"] = "runtime error", str(e)[:300]
                break
            if call.error:
                verdict, record["why"] = "runtime error", str(call.error)[:300]
                break
            trial = judge_trial(call.output, ctx.golden(recipe), kb)
            if trial["verdict"] != "correct" and "why" in trial:
                verdict, record["why"] = trial["verdict"], trial["why"]
                break
            record["passed"] += trial["verdict"] == "correct"
            record["passed_v0"] += trial.get("v0") == "correct"
            record["max_difference"].append(float(f"{trial['max_difference']:.6g}"))
        if verdict == "correct" and record["passed"] < kb.trials:
            verdict = "incorrect"
        record["verdict"] = verdict
        if verdict != "runtime error":
            record["verdict_v0"] = "correct" if record["passed_v0"] == kb.trials else "incorrect"
        ctx.evidence.kernelbench = record
        return None


__all__ = ["KernelBenchVerdictGate", "trial_seeds", "allclose", "judge_trial"]
