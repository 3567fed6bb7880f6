"""One kernel item, start to verdict, in one direction (docs/architecture.md):

provenance → load → build (compiled candidates: build/stage.py) → correctness (candidate sandbox) → probes →
[timing (+ baseline sandbox) → integrity → breaker] → verdict.

A later stage never runs if an earlier one refused the item; nothing is timed before correctness passed;
the verdict carries the frozen result (accepted), the quarantine record (breaker) or the refusal.
The store and the report come after, in the session.

The arms run in two sandboxes: the candidate's (problem + candidate) and the baseline's (problem + the strongest
frozen baseline, never the candidate). Golden outputs are computed here, on the device, and never sent anywhere.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import time
from typing import Any, Optional

from .build.stage import BuildStage
from .errors import ProblemLoadError
from .flow_baseline import BaselineStage
from .flow_probes import ProbeStage
from .gates.base import STAGES, BaselineChoice, CandidateFailure, CandidateRefusal, GateContext, GateOutcome
from .gates.correctness import timed_outputs_floor
from .item_memory import DoesNotFit, PlannedGolden, holders, plan_item, settle, stage_start
from .item_run import FlowEnv, FlowVerdict, ItemRun
from .item_run import details as item_details
from .item_run import measurement as item_measurement
from .item_run import result as item_result
from .jsonable import jsonable
from .judging import prepare_judging
from .measure.input_sets import choose_input_sets
from .measure.memory import UNBUDGETED, MemoryPlan
from .measure.schedule import (
    BUDGET_SPENT,
    TARGET_REACHED,
    TimingEvidence,
    TimingRefused,
    pairs_stop_reason,
    pool_process_pairs,
    run_paired_timing,
)
from .measure.until_target import rule_for
from .problems.loader import LoadedProblem
from .problems.model import AA_CANDIDATE_NAME, REFERENCE_BASELINE, KernelItemSpec, SourceFile
from .result import ItemOutcome, QuarantineRecord
from .sandbox.runner import Sandbox, SandboxFailure
from .seeds import SeedSource, problem_init_seed

#: pairs of processes every timed item gets whatever its budget (protocols 3-4 had exactly these two); the pairs
#: after them start only while the item's timing is within its budget (``KernelFlow._timed``)
MIN_PROCESS_PAIRS = 2


class KernelFlow(BaselineStage, BuildStage, ProbeStage):
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

    def _init(self, problem_src: SourceFile, sizes: dict, init_seed: int, role: str, source: Optional[SourceFile],
              class_name: str) -> dict:
        env = self.env
        return {
            "role": role,
            "threads": env.protocol.timing.cpu_threads,
            "device": {"target": env.device_spec.target, "index": env.device.index, "options": env.device.options},
            "problem": problem_src.wire(),
            "source": source.wire() if source else None,
            "class_name": class_name,
            "init_seed": init_seed,
            "sizes": sizes,
            "disable_gc": env.protocol.timing.disable_gc,
            "thp": env.protocol.sandbox.thp,
            "cpus": env.cpus,
            "build": self.build_payload(problem_src, role, source),  # the item's build: its candidate sandboxes only
        }

    def _start(self, init: dict, label: str, ctx: Optional[GateContext] = None) -> Sandbox:
        t0 = time.perf_counter()
        box = self.env.pool.start(init, label=label)
        if self.env.cpus and hasattr(os, "sched_setaffinity"):
            try:  # the main thread only: threads the runtime started while the sandbox loaded stay free
                os.sched_setaffinity(box.pid, set(self.env.cpus))
            except OSError:
                pass
        if ctx is not None:
            ctx.details.setdefault("sandbox_start_s", {})[init["role"]] = round(time.perf_counter() - t0, 4)
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

    def _timing(self, cand: Sandbox, base: Sandbox, seeds: SeedSource, probes: Optional[dict[str, dict]] = None,
                share: int = 1, memory: MemoryPlan = UNBUDGETED,
                derive_spread: Optional[float] = None, calibrate_first: str = "A") -> TimingEvidence:
        """Paired timing of one pair of sandboxes; ``share``: the item's timing is split over up to that many pairs
        of processes, each with that share of the budget and of the maximum pair count, and its share of the
        minimum among the MIN_PROCESS_PAIRS that always run. ``calibrate_first``: the arm that calibrates first
        (alternated over pairs of processes, as their start order is)."""
        env = self.env
        plan = dataclasses.replace(env.timing_plan(), derive_spread=derive_spread)
        if share > 1:
            # min_pairs is shared by the pairs of processes every item gets (MIN_PROCESS_PAIRS), so the item has it
            # whether or not later ones start; each may stop on its own CI only once it has check_every pairs (a
            # bootstrap of 2-3 ratios can read narrow by chance)
            least = max(2, -(-plan.min_pairs // min(share, MIN_PROCESS_PAIRS)))
            plan = dataclasses.replace(plan, min_pairs=least, max_pairs=max(least, plan.max_pairs // share),
                                       ci_stop_min_pairs=max(plan.check_every, least))
        return run_paired_timing(cand, base, env.protocol, plan, seeds,
                                 stats_seed=seeds.seed("stats"), graph_below_s=float(
                                     env.device.options.get("graph_below_s", 0.0) or 0.0),
                                 budget_scale=env.budget_scale / share, sample_cpus=env.cpus,
                                 probes=probes, memory=memory, k_override=env.k_override,
                                 calibrate_first=calibrate_first)

    # ------------------------------------------------------------------------------------------ the item
    def run(self, spec: KernelItemSpec) -> FlowVerdict:
        env = self.env
        started = time.perf_counter()
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
        # both arms are built from one seed per problem and device, so a problem's items share parameters
        init_seed = problem_init_seed(env.nonce, spec.problem.name, spec.device)
        golden = PlannedGolden(problem, env.device, sizes, init_seed)
        ctx = GateContext(nodeid=spec.nodeid, protocol=env.protocol, problem=problem, candidate=spec.candidate,
                          device=env.device, seeds=seeds, sizes=sizes, measuring=env.measuring, golden=golden)
        ctx.candidate_sha256 = cand_src.sha256 if cand_src else None
        item = ItemRun(spec, ctx, problem_src, cand_src, problem, sizes, init_seed, golden, started)
        try:  # how its answers are judged; its device memory, planned before any sandbox starts and checked at each
            prepare_judging(env, item)  # stage's (item_memory)
            ctx.memory = plan_item(env, item)
            return self._run(item)
        except DoesNotFit as e:
            return FlowVerdict(self._outcome(spec, "error", "memory", f"{spec.problem.name}: {e}",
                                             warnings=tuple(ctx.warnings), details=item_details(item)))
        except SandboxFailure as e:
            gate = "memory" if e.kind == "memory" and "device memory" in e.detail else \
                "timing" if "timing" in e.detail or "warm-up" in e.detail else "sandbox"
            if gate == "memory":  # who held the device when a sandbox ran out (memory_holders)
                ctx.details["memory_holders"] = holders(env)
            return FlowVerdict(self._outcome(spec, "error", gate, str(e), warnings=tuple(ctx.warnings),
                                             details=item_details(item)))
        except ProblemLoadError as e:
            return FlowVerdict(self._outcome(spec, "rejected", "load", f"{e.path}: {e.reason}",
                                             details=item_details(item)))
        except CandidateFailure as e:
            return FlowVerdict(self._outcome(spec, "rejected", "correctness", f"the candidate raised: {e}",
                                             details=item_details(item)))
        except CandidateRefusal as e:
            return self._refused(item, GateOutcome.refuse("integrity", str(e)))
        except Exception as e:  # noqa: BLE001 - torch.OutOfMemoryError in the controller (golden outputs)
            if type(e).__name__ != "OutOfMemoryError":
                raise
            ctx.details["memory_holders"] = holders(env)
            return FlowVerdict(self._outcome(
                spec, "error", "memory", f"the controller ran out of device memory computing golden outputs "
                f"({str(e).splitlines()[0][:300]}); details.memory has the item's plan, details.memory_holders who "
                "held the device", warnings=tuple(ctx.warnings), details=item_details(item)))

    def _run(self, item: ItemRun) -> FlowVerdict:
        env, spec, ctx = self.env, item.spec, item.ctx
        if env.device.framework == "mlx" and item.problem.mlx_model is None:
            return FlowVerdict(self._outcome(spec, "rejected", "load",
                                             f"{item.problem_src.path} has no ModelMLX port for --device=mlx"))
        built = self.build(item)  # ---- compiled candidates: built once, before anything runs them
        if built is not None:
            return built
        # ---- the strongest frozen baseline (timed in clean processes: needs the device to itself)
        if env.measuring and spec.candidate.name == AA_CANDIDATE_NAME:
            # A/A: the reference against itself, never against a faster declared baseline (that would be a
            # comparison, not the harness's own bias)
            item.choice = BaselineChoice(REFERENCE_BASELINE, item.problem_src.sha256, 1.0)
            ctx.baseline = item.choice
            ctx.details["baseline_choice"] = {"baseline": "reference", "gain_vs_reference": 1.0, "declared": {},
                                              "aa": True}
        elif env.measuring:
            t0 = time.perf_counter()
            with env.lock.exclusive():
                item.choice = self.baseline_choice(spec.problem, item.problem_src, item.problem, item.sizes,
                                                   item.golden, item)
            ctx.details.setdefault("stage_seconds", {})["baseline_choice"] = round(time.perf_counter() - t0, 4)
            ctx.baseline = item.choice
            ctx.warnings.extend(item.choice.errors)
            ctx.details["baseline_choice"] = {"baseline": item.choice.baseline.name,
                                              "gain_vs_reference": item.choice.gain_vs_reference,
                                              "declared": item.choice.considered}
            if not item.choice.baseline.is_reference:
                item.baseline_src = SourceFile.read(item.choice.baseline.path)  # type: ignore[arg-type]
        # ---- 2. load the candidate in its sandbox; 3. correctness; 4. probes (device shared)
        init = self._init(item.problem_src, item.sizes, item.init_seed, "candidate", item.cand_src,
                          spec.candidate.class_name)
        with env.lock.shared():
            stage_start(env, item, "correctness", "correctness")
            box = self._start(init, spec.item_key, ctx)
        item.boxes["candidate"] = box
        probe: Optional[dict] = None
        with box:
            self._adopt(ctx, box)
            for stage in ("correctness", "probe"):
                with env.lock.shared():
                    if stage == "probe":
                        stage_start(env, item, "probes", "probes", live=[box])
                    refused = self._run_stage(ctx, stage)
                if refused:
                    return self._refused(item, refused)
            if not env.measuring:
                return FlowVerdict(self._outcome(
                    spec, "accepted", None, "correctness and probes passed (not timed: run with --autotune)",
                    baseline=item.baseline_name, warnings=tuple(ctx.warnings), details=item_details(item)))
            if not env.protocol.timing.fresh_sandboxes:
                item.golden.clear()
                timed_refusal = self._timed(item, box)
                if timed_refusal:
                    return timed_refusal
            else:
                probe = self._probe_graphs(box, ctx)
        item.golden.clear()  # correctness and probes are done: their golden outputs go before timing
        settle(env, item, "the correctness sandbox")
        if env.protocol.timing.fresh_sandboxes and probe is not None:
            item.probes["B"] = probe
            # the baseline's probe: in a sandbox of its own, started once the candidate's has closed (A/A: the
            # candidate's sandbox ran the same reference, and its probe is the baseline's)
            item.probes["A"] = probe if spec.candidate.name == AA_CANDIDATE_NAME else self._baseline_probe(item)
        if env.protocol.timing.fresh_sandboxes:
            # both arms start timing from the same process history: a candidate sandbox as fresh as the baseline's
            with env.lock.shared():
                stage_start(env, item, "timing", "timing")
                box = self._start(init, f"{spec.item_key}-timing", ctx)
            item.boxes["candidate (timing)"] = box
            with box:
                self._adopt(ctx, box)
                timed_refusal = self._timed(item, box)
                if timed_refusal:
                    return timed_refusal
        result = item_result(self.env, item)
        return FlowVerdict(self._outcome(spec, "accepted", None, ctx.measurement.stop_reason if ctx.measurement else "",
                                         baseline=item.baseline_name, measurement=ctx.measurement, result=result,
                                         warnings=tuple(ctx.warnings), details=item_details(item)),
                           result=result)

    def _adopt(self, ctx: GateContext, box: Sandbox) -> None:
        """``box`` is now the item's candidate sandbox: what its import did is evidence for the tamper gate."""
        ctx.sandbox = box
        ctx.import_tamper = list(ctx.import_tamper) + list(box.hello.get("tamper", []))
        ctx.threads_added_by_import = max(ctx.threads_added_by_import, int(box.hello.get("threads_after_import", 0))
                                          - int(box.hello.get("threads_before_import", 0)))

    def _timed(self, item: ItemRun, box: Sandbox) -> Optional[FlowVerdict]:
        """5. paired timing against the baseline in its own sandbox (device exclusive), in ``[timing].process_pairs``
        pairs of processes (``[devices.cuda].process_pairs`` on CUDA); 6. integrity (on every pair's evidence),
        7. breaker (on the pooled measurement). ``None`` when the item passed them all."""
        env, ctx = self.env, item.ctx
        plan = env.timing_plan()
        n = plan.process_pairs
        runs: list[TimingEvidence] = []
        t0 = time.perf_counter()
        choice = choose_input_sets(item.golden, env.protocol, plan.derive_spread, ctx.seeds.seed("input-sets"),
                                   ctx.seeds.seed("input-sets-positions"), timed_outputs_floor(ctx))
        item.golden.clear()
        item.derive_spread = choice.spread
        ctx.details["input_sets"] = choice.details()
        until = rule_for(env.protocol, env.device_spec.name, plan) if env.pairs_until_target else None
        ended = BUDGET_SPENT
        pooled: dict[int, TimingEvidence] = {}  # pairs of processes -> their pooled evidence, made once

        def pool(count: int) -> TimingEvidence:
            if count not in pooled:
                pooled[count] = self._pooled(runs[:count], n, ended)
            return pooled[count]

        for j in range(n):
            # past the second pair of processes, one more starts only while the timing stage (sandbox starts and
            # imports included) is within the item budget: where a sandbox takes seconds to start (a problem
            # importing torch._dynamo: ~5 s), the budget goes to timing rather than to starts; --autotune-pairs: all
            if (env.process_pairs is None and j >= MIN_PROCESS_PAIRS
                    and time.perf_counter() - t0 >= plan.item_budget_s * env.budget_scale):
                break
            # --autotune-max-pairs: one more only while the protocol's CI of those so far is wider than the target
            if until is not None and until.reached(
                    [math.log(ev.estimate.speedup) if ev.estimate and ev.estimate.speedup > 0 else None
                     for ev in runs], lambda: pool(len(runs)).estimate.rel_width):  # type: ignore[union-attr]
                ended = TARGET_REACHED
                break
            refused = self._timed_pair(item, box if j == 0 else None, j, n, runs)
            if refused is not None:
                return refused
        ev = runs[0] if n == 1 else pool(len(runs))
        if n > 1 and len(runs) < n:  # pooled before it was known why the next pair of processes would not start
            ev = dataclasses.replace(ev, stop_reason=pairs_stop_reason(runs, n, ended))
        if until is not None:
            ctx.details["until_target"] = {"max_pairs": n, "stopped_at_target": ended == TARGET_REACHED,
                                           "readings": [{"pairs": p, "ci_rel_width": w} for p, w in until.readings]}
        ctx.timing = ev
        ctx.details["timing_stage_s"] = time.perf_counter() - t0
        ctx.measurement = item_measurement(env, item, ev)
        refused_outcome = self._run_stage(ctx, "breaker")
        return self._refused(item, refused_outcome) if refused_outcome else None

    def _timed_pair(self, item: ItemRun, box: Optional[Sandbox], j: int, n: int,
                    runs: list[TimingEvidence]) -> Optional[FlowVerdict]:
        """One pair of processes: ``box`` (the candidate's timing sandbox already started) or a fresh one, and a fresh
        baseline sandbox; odd pairs start the baseline's first, so neither arm is always the older process."""
        env, spec, ctx = self.env, item.spec, item.ctx
        base_init = self._init(item.problem_src, item.sizes, item.init_seed, "baseline", item.baseline_src, "ModelNew")
        cand_init = self._init(item.problem_src, item.sizes, item.init_seed, "candidate", item.cand_src,
                               spec.candidate.class_name)
        suffix = f"-p{j}" if n > 1 else ""
        with env.lock.exclusive(), contextlib.ExitStack() as stack:
            if box is not None:  # the candidate's timing sandbox started with the item: it ends with this pair too
                stack.enter_context(box)
            else:
                stage_start(env, item, f"timing{suffix}", "timing")
            if box is None and j % 2 == 1:
                base = stack.enter_context(self._start(base_init, f"baseline-{spec.item_key}{suffix}", ctx))
                box = stack.enter_context(self._start(cand_init, f"{spec.item_key}-timing{suffix}", ctx))
            else:
                if box is None:
                    box = stack.enter_context(self._start(cand_init, f"{spec.item_key}-timing{suffix}", ctx))
                base = stack.enter_context(self._start(base_init, f"baseline-{spec.item_key}{suffix}", ctx))
            if j > 0:
                self._adopt(ctx, box)
                item.boxes[f"candidate (timing){suffix}"] = box
            item.boxes[f"baseline{suffix}"] = base
            try:
                ev = self._timing(box, base, ctx.seeds, item.probes, share=n, memory=ctx.memory,
                                  calibrate_first="B" if j % 2 else "A",
                                  derive_spread=item.derive_spread)
            except TimingRefused as e:
                return self._refused(item, GateOutcome(e.gate, str(e), e.verdict))
            ctx.timing = ev
            runs.append(ev)
            # integrity on this pair's own evidence (its rounds, clocks and CPU accounts), sandboxes still alive
            refused = self._run_stage(ctx, "integrity")
            if refused:
                return self._refused(item, refused)
        item.golden.clear()
        settle(env, item, f"the timing sandboxes{suffix}")
        return None

    def _pooled(self, runs: list[TimingEvidence], planned: int, ended: str) -> TimingEvidence:
        return pool_process_pairs(runs, planned, self.env.protocol, self.env.device_spec.name, ended=ended)

    def _refused(self, item: ItemRun, refused: GateOutcome) -> FlowVerdict:
        ctx = item.ctx
        details = jsonable({**item_details(item), **refused.details})
        outcome = self._outcome(item.spec, refused.verdict, refused.gate, refused.reason, baseline=item.baseline_name,
                                measurement=ctx.measurement, warnings=tuple(ctx.warnings), details=details)
        if refused.verdict == "quarantined" and ctx.measurement is not None:
            return FlowVerdict(outcome, quarantine=QuarantineRecord(item_result(self.env, item), refused.reason))
        return FlowVerdict(outcome)


__all__ = ["KernelFlow", "FlowEnv", "FlowVerdict", "ItemRun", "KernelItemSpec", "STAGES"]
