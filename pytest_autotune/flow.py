"""One kernel item, start to verdict, in one direction (DESIGN §1):

provenance → load (sandbox) → correctness → probes → [timing → integrity → breaker] → verdict.

A later stage never runs if an earlier one refused the item; nothing is timed before correctness passed;
the verdict carries the frozen result (accepted), the quarantine record (breaker) or the refusal.
The store and the report come after, in the session.
"""

from __future__ import annotations

import json
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import torch

from .errors import ProblemLoadError
from .gates.base import BaselineChoice, CandidateFailure, Gate, GateContext, GateOutcome, STAGES
from .gates.compare import compare_outputs
from .measure.devices.base import Device
from .measure.devices.spec import DeviceSpec
from .measure.lock import DeviceLock
from .measure.schedule import TimingRefused, run_paired_timing
from .problems.discovery import baselines_for
from .problems.inputs import materialize
from .problems.loader import LoadedProblem
from .problems.model import REFERENCE_BASELINE, KernelItemSpec, ProblemRef, SourceFile
from .protocol import Protocol
from .result import ItemOutcome, KernelResult, Measurement, QuarantineRecord
from .sandbox.runner import Sandbox, SandboxFailure, SandboxPool
from .seeds import SeedSource


@dataclass
class FlowEnv:
    """Everything a flow needs from the session; built once per process (controller or xdist worker)."""

    protocol: Protocol
    device_spec: DeviceSpec
    device: Device
    pool: SandboxPool
    nonce: bytes
    gates: list[Gate]
    measuring: bool
    run_id: str
    exploratory: bool
    item_provenance: Callable[[dict], dict]
    lock: DeviceLock
    budget_scale: float = 1.0
    baselines: dict = field(default_factory=dict)  # (problem path, sha, device) -> BaselineChoice
    problems: dict = field(default_factory=dict)  # (path, sha) -> LoadedProblem


@dataclass
class FlowVerdict:
    outcome: ItemOutcome
    result: Optional[KernelResult] = None
    quarantine: Optional[QuarantineRecord] = None


class _Golden:
    """Reference outputs computed in the controller (never sent to a sandbox), cached per recipe."""

    def __init__(self, problem: LoadedProblem, device: Device, sizes: dict, init_seed: int) -> None:
        self.problem = problem
        self.device = device
        self.sizes = sizes
        self.init_seed = init_seed
        self._models: dict[str, Any] = {}
        self._cache: "OrderedDict[str, Any]" = OrderedDict()
        # MLX is the held-out leg: its golden outputs come from the torch reference on the CPU
        self.on_device = device.framework == "torch"

    def _model(self, sizes: dict) -> Any:
        key = json.dumps(sorted(sizes.items()))
        if key not in self._models:
            with self.problem.sizes(sizes):
                m = self.problem.build_reference(self.init_seed)
            self._models[key] = self.device.prepare_model(m) if self.on_device else m
        return self._models[key]

    def __call__(self, recipe: dict) -> Any:
        key = json.dumps(recipe, sort_keys=True)
        if key in self._cache:
            self._cache.move_to_end(key)
            return self._cache[key]
        sizes = {**self.sizes, **(recipe.get("sizes") or {})}
        r = dict(recipe)
        r["sizes"] = sizes
        model = self._model(sizes)
        if self.on_device:
            inputs = materialize(self.problem, r, self.device.to_device, self.device.generation_device())
            with torch.no_grad():
                out = self.device.to_host(model(*inputs))
        else:
            inputs = materialize(self.problem, r)
            with torch.no_grad():
                out = model(*inputs)
            out = out.detach().clone() if isinstance(out, torch.Tensor) else tuple(o.detach().clone() for o in out)
        self._cache[key] = out
        while len(self._cache) > 24:
            self._cache.popitem(last=False)
        return out


class KernelFlow:
    def __init__(self, env: FlowEnv) -> None:
        self.env = env

    # ------------------------------------------------------------------------------------------ helpers
    def _outcome(self, spec: KernelItemSpec, verdict: str, gate: Optional[str], reason: str, **kw: Any) -> ItemOutcome:
        return ItemOutcome(nodeid=spec.nodeid, kind="kernel", problem=spec.problem.name,
                           candidate=spec.candidate.name, device=spec.device, verdict=verdict,  # type: ignore[arg-type]
                           gate=gate, reason=reason, **kw)

    def _load_problem(self, src: SourceFile) -> LoadedProblem:
        key = (str(src.path), src.sha256)
        if key not in self.env.problems:
            self.env.problems[key] = LoadedProblem.load(src)
        return self.env.problems[key]

    def _init(self, problem_src: SourceFile, sizes: dict, init_seed: int, candidate: Optional[SourceFile],
              candidate_class: str, baseline: Optional[SourceFile]) -> dict:
        env = self.env
        return {
            "threads": env.protocol.timing.cpu_threads,
            "device": {"target": env.device_spec.target, "index": env.device.index, "options": env.device.options},
            "problem": problem_src.wire(),
            "candidate": candidate.wire() if candidate else None,
            "candidate_class": candidate_class,
            "baseline": baseline.wire() if baseline else None,
            "baseline_class": "ModelNew",
            "init_seed": init_seed,
            "sizes": sizes,
            "disable_gc": env.protocol.timing.disable_gc,
        }

    def _start(self, init: dict, label: str) -> Sandbox:
        box = self.env.pool.start(init, label=label)
        if not box.hello.get("ok"):
            err = box.hello
            box.close()
            raise ProblemLoadError(err.get("path") or "sandbox", err.get("error", "load failed"))
        return box

    def _run_stage(self, ctx: GateContext, stage: str) -> Optional[GateOutcome]:
        t0 = time.perf_counter()
        try:
            for gate in self.env.gates:
                if stage not in gate.stages or (gate.needs_timing and not ctx.measuring):
                    continue
                verdict = gate.check(ctx, stage)
                if verdict is not None:
                    return verdict
            return None
        finally:
            ctx.details.setdefault("stage_seconds", {})[stage] = round(time.perf_counter() - t0, 4)

    # ------------------------------------------------------------------------------------------ baseline
    def baseline_choice(self, pref: ProblemRef, problem_src: SourceFile, problem: LoadedProblem, sizes: dict,
                        golden: _Golden) -> BaselineChoice:
        """The strongest frozen baseline on this device: the reference, or a declared baseline (a file under
        ``baselines/<problem>/``) that is correct and, timed paired against the reference here, faster.
        Computed once per problem and device per process; the caller holds the device exclusively."""
        key = (str(pref.path), problem_src.sha256, self.env.device_spec.name)
        if key in self.env.baselines:
            return self.env.baselines[key]
        env = self.env
        seeds = SeedSource(env.nonce, f"{pref.name}|@baseline|{env.device_spec.name}")
        init_seed = seeds.seed("init")
        declared = baselines_for(pref) if env.device.framework == "torch" else []
        best = BaselineChoice(REFERENCE_BASELINE, problem_src.sha256, 1.0)
        budget = env.protocol.timing.item_budget_s * env.budget_scale
        for b in declared:
            bsrc = SourceFile.read(b.path)  # type: ignore[arg-type]
            init = self._init(problem_src, sizes, init_seed, bsrc, "ModelNew", None)
            try:
                with self._start(init, f"baseline-{pref.name}-{b.name}") as box:
                    recipes = [{"seed": s} for s in seeds.seeds("correctness", env.protocol.seeds.count)]
                    reply = box.request({"cmd": "outputs", "arm": "candidate", "recipes": recipes,
                                         "recheck_delay": 0.0}, phase="baseline check")
                    bad = _first_mismatch(reply, recipes, golden, env.protocol)
                    if bad:
                        raise ProblemLoadError(str(b.path), f"declared baseline is not correct: {bad}")
                    ev = run_paired_timing(box, env.protocol, seeds, stats_seed=seeds.seed("stats"), budget_s=budget)
            except ProblemLoadError as e:
                best.errors.append(f"baseline {b.name} ignored: {e.reason}")
                best.considered[b.name] = None
                continue
            assert ev.estimate is not None
            best.considered[b.name] = ev.estimate.speedup
            if ev.estimate.speedup > best.gain_vs_reference:
                best.baseline, best.baseline_sha256, best.gain_vs_reference = b, bsrc.sha256, ev.estimate.speedup
        env.baselines[key] = best
        return best

    # ------------------------------------------------------------------------------------------ the item
    def run(self, spec: KernelItemSpec) -> FlowVerdict:
        env = self.env
        t_item = time.perf_counter()
        seeds = SeedSource(env.nonce, spec.item_key)
        # ---- 1. provenance: pin the exact bytes of everything that decides the outcome
        try:
            problem_src = SourceFile.read(spec.problem.path)
            cand_src = SourceFile.read(spec.candidate.path) if spec.candidate.path else None
        except OSError as e:
            return FlowVerdict(self._outcome(spec, "rejected", "provenance", f"cannot read {e.filename}: {e.strerror}"))
        try:
            problem = self._load_problem(problem_src)
        except ProblemLoadError as e:
            return FlowVerdict(self._outcome(spec, "rejected", "load", f"problem {e.path}: {e.reason}"))
        sizes = problem.sizes_for(spec.device)
        init_seed = seeds.seed("init")
        golden = _Golden(problem, env.device, sizes, init_seed)
        ctx = GateContext(nodeid=spec.nodeid, protocol=env.protocol, problem=problem, candidate=spec.candidate,
                          device=env.device, seeds=seeds, sizes=sizes, measuring=env.measuring, golden=golden)
        ctx.details["candidate_sha256"] = cand_src.sha256 if cand_src else None
        try:
            return self._run(spec, ctx, problem_src, cand_src, problem, sizes, init_seed, golden, t_item)
        except SandboxFailure as e:
            gate = "timing" if "timing" in e.detail or "warm-up" in e.detail else "sandbox"
            return FlowVerdict(self._outcome(spec, "error", gate, str(e), warnings=tuple(ctx.warnings),
                                             details=_jsonable(ctx.details)))
        except ProblemLoadError as e:
            return FlowVerdict(self._outcome(spec, "rejected", "load", f"{e.path}: {e.reason}",
                                             details=_jsonable(ctx.details)))
        except CandidateFailure as e:
            return FlowVerdict(self._outcome(spec, "rejected", "correctness", f"the candidate raised: {e}",
                                             details=_jsonable(ctx.details)))

    def _run(self, spec: KernelItemSpec, ctx: GateContext, problem_src: SourceFile, cand_src: Optional[SourceFile],
             problem: LoadedProblem, sizes: dict, init_seed: int, golden: _Golden, t_item: float) -> FlowVerdict:
        env = self.env
        if env.device.framework == "mlx" and problem.mlx_model is None:
            return FlowVerdict(self._outcome(spec, "rejected", "load",
                                             f"{problem_src.path} has no ModelMLX port for --device=mlx"))
        # ---- strongest frozen baseline (timed in clean processes: needs the device to itself)
        choice: Optional[BaselineChoice] = None
        baseline_src: Optional[SourceFile] = None
        if env.measuring:
            with env.lock.exclusive():
                choice = self.baseline_choice(spec.problem, problem_src, problem, sizes, golden)
            ctx.baseline = choice
            ctx.warnings.extend(choice.errors)
            ctx.details["baseline_choice"] = {"baseline": choice.baseline.name, "gain_vs_reference":
                                              choice.gain_vs_reference, "declared": choice.considered}
            if not choice.baseline.is_reference:
                baseline_src = SourceFile.read(choice.baseline.path)  # type: ignore[arg-type]
        baseline_name = choice.baseline.name if choice else REFERENCE_BASELINE.name
        baseline_sha = choice.baseline_sha256 if choice else problem_src.sha256

        init = self._init(problem_src, sizes, init_seed, cand_src, spec.candidate.class_name, baseline_src)
        # ---- 2. load the candidate in its sandbox; 3. correctness; 4. probes (device shared)
        with env.lock.shared():
            box = self._start(init, spec.item_key)
        with box:
            ctx.sandbox = box
            ctx.import_tamper = list(box.hello.get("tamper", []))
            ctx.threads_added_by_import = int(box.hello.get("threads_after_import", 0)) - int(
                box.hello.get("threads_before_import", 0))
            for stage in ("correctness", "probe"):
                with env.lock.shared():
                    refused = self._run_stage(ctx, stage)
                if refused:
                    return self._refused(spec, ctx, refused, baseline_name)
            if not env.measuring:
                return FlowVerdict(self._outcome(
                    spec, "accepted", None, "correctness and probes passed (not timed: run with --autotune)",
                    baseline=baseline_name, warnings=tuple(ctx.warnings), details=_jsonable(ctx.details)))
            # ---- 5. paired timing (device exclusive)
            assert choice is not None
            # the clean sandbox: the same baseline, never the candidate, timed beside the item (baseline sanity)
            clean_init = self._init(problem_src, sizes, init_seed, None, spec.candidate.class_name, baseline_src)
            with env.lock.exclusive(), self._start(clean_init, f"clean-{spec.item_key}") as clean:
                try:
                    ev = run_paired_timing(box, env.protocol, ctx.seeds, stats_seed=ctx.seeds.seed("stats"),
                                           budget_s=env.protocol.timing.item_budget_s * env.budget_scale,
                                           clean=clean)
                except TimingRefused as e:
                    return self._refused(spec, ctx, GateOutcome.refuse("timing", str(e)), baseline_name)
                ctx.timing = ev
                est = ev.estimate
                assert est is not None
                ctx.measurement = Measurement(
                    n_pairs=est.n_pairs, candidate_s=est.candidate_s, baseline_s=est.baseline_s,
                    speedup=est.speedup, ci_low=est.ci_low, ci_high=est.ci_high, ci_target_met=ev.ci_target_met,
                    strawman_speedup=est.speedup * choice.gain_vs_reference, calls_per_sample=ev.calls_per_sample,
                    stop_reason=ev.stop_reason)
                if not ev.ci_target_met:
                    ctx.warnings.append(
                        f"CI target not reached: the 95% CI is {est.rel_width:.1%} of the speedup wide after "
                        f"{est.n_pairs} pairs, target {env.protocol.statistics.ci_target_rel_width:.0%} "
                        f"({ev.stop_reason})")
            # ---- 6. integrity, 7. breaker
            for stage in ("integrity", "breaker"):
                refused = self._run_stage(ctx, stage)
                if refused:
                    return self._refused(spec, ctx, refused, baseline_name, cand_src, problem_src, baseline_sha,
                                         sizes)
        result = self._result(spec, ctx, problem_src, cand_src, baseline_name, baseline_sha, sizes, box.pid)
        ctx.details["item_seconds"] = time.perf_counter() - t_item
        return FlowVerdict(self._outcome(spec, "accepted", None, ctx.measurement.stop_reason if ctx.measurement else "",
                                         baseline=baseline_name, measurement=ctx.measurement, result=result,
                                         warnings=tuple(ctx.warnings), details=_jsonable(ctx.details)),
                           result=result)

    def _result(self, spec: KernelItemSpec, ctx: GateContext, problem_src: SourceFile, cand_src: Optional[SourceFile],
                baseline_name: str, baseline_sha: str, sizes: dict, sandbox_pid: int) -> KernelResult:
        env = self.env
        m = ctx.measurement
        assert m is not None
        cand_sha = cand_src.sha256 if cand_src else baseline_sha
        prov = env.item_provenance({
            "problem_sha256": problem_src.sha256, "candidate_sha256": cand_sha, "baseline_sha256": baseline_sha,
            "seeds": list(ctx.correctness_seeds), "sizes": sizes, "sandbox_pid": sandbox_pid,
            "device_index": env.device.index,
        })
        prov["timing"] = {"calls_per_sample": m.calls_per_sample, "stop_reason": m.stop_reason,
                          "wall_clock": ctx.details.get("wall_clock"),
                          "baseline_sanity": ctx.details.get("baseline_sanity")}
        return KernelResult(
            run_id=env.run_id, kind="kernel", nodeid=spec.nodeid, problem=spec.problem.name,
            problem_sha256=problem_src.sha256, candidate=spec.candidate.name, candidate_sha256=cand_sha,
            baseline=baseline_name, baseline_sha256=baseline_sha, device=spec.device,
            seeds=tuple(ctx.correctness_seeds), measurement=m, correctness="passed",
            probes=_jsonable(ctx.probe_summary), integrity="passed", breaker=ctx.details.get("breaker", "ok"),
            protocol_sha256=env.protocol.sha256, exploratory=env.exploratory, provenance=_jsonable(prov),
            notes=tuple(ctx.warnings),
        )

    def _refused(self, spec: KernelItemSpec, ctx: GateContext, refused: GateOutcome, baseline_name: str,
                 cand_src: Optional[SourceFile] = None, problem_src: Optional[SourceFile] = None,
                 baseline_sha: str = "", sizes: Optional[dict] = None) -> FlowVerdict:
        details = _jsonable({**ctx.details, **refused.details})
        outcome = self._outcome(spec, refused.verdict, refused.gate, refused.reason, baseline=baseline_name,
                                measurement=ctx.measurement, warnings=tuple(ctx.warnings), details=details)
        if refused.verdict == "quarantined" and problem_src is not None:
            result = self._result(spec, ctx, problem_src, cand_src, baseline_name, baseline_sha, sizes or {},
                                  ctx.sandbox.pid if ctx.sandbox else 0)
            return FlowVerdict(outcome, quarantine=QuarantineRecord(result, refused.reason))
        return FlowVerdict(outcome)


def _first_mismatch(reply: dict, recipes: list, golden: _Golden, proto: Protocol) -> Optional[str]:
    if not reply.get("ok"):
        return str(reply.get("error"))
    for recipe, res in zip(recipes, reply["results"]):
        if "error" in res:
            return res["error"]
        c = compare_outputs(res["output"], golden(recipe), proto, f"seed {recipe['seed']}")
        if not c.ok:
            return c.reason
    return None


def _jsonable(x: Any) -> Any:
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, float):
        return x if x == x and x not in (float("inf"), float("-inf")) else None
    if isinstance(x, (str, int, bool)) or x is None:
        return x
    if isinstance(x, Path):
        return str(x)
    if isinstance(x, torch.Tensor):
        return x.tolist() if x.numel() <= 16 else f"tensor{tuple(x.shape)}"
    return str(x)


__all__ = ["KernelFlow", "FlowEnv", "FlowVerdict", "KernelItemSpec", "STAGES"]
