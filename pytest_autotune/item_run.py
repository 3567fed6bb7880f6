"""An item's run as the flow gathers it, and what it becomes: the measurement, the details the report shows and the
frozen result row (docs/architecture.md#the-flow). ``flow.py`` drives the stages; this module holds their
values and turns them into records."""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from .gates.base import BaselineChoice, Gate, GateContext
from .golden import Golden
from .jsonable import jsonable
from .measure.devices.base import Device
from .measure.devices.spec import DeviceSpec
from .measure.lock import DeviceLock
from .measure.sampling import KOverride
from .measure.schedule import TimingEvidence
from .problems.contract import contract_record
from .problems.loader import LoadedProblem
from .problems.model import REFERENCE_BASELINE, KernelItemSpec, SourceFile
from .protocol import Protocol, TimingPlan
from .result import ItemOutcome, KernelResult, Measurement, QuarantineRecord
from .sandbox.runner import SandboxPool


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
    #: CPUs both sandboxes of an item are pinned to ([timing].pin), or None
    cpus: Optional[list[int]] = None
    #: ``--autotune-k``: calls per sample fixed by the user (exploratory runs only), or None: the protocol's choice
    k_override: Optional[KOverride] = None
    baselines: dict = field(default_factory=dict)  # (problem path, sha, device) -> BaselineChoice
    problems: dict = field(default_factory=dict)  # (path, sha) -> LoadedProblem
    baseline_probes: dict = field(default_factory=dict)  # (problem path, baseline sha, device) -> graph probe
    footprints: dict = field(default_factory=dict)  # (problem sha, sizes, device) -> measure.memory.CallFootprint
    #: the build cache's folder (build/cache.py build_root); None: builds are not kept
    build_root: Optional[Path] = None
    builds: dict = field(default_factory=dict)  # (problem sha, candidate sha) -> the item's build (init payload)
    prebuilt: dict = field(default_factory=dict)  # build key -> what the session's build pool made of it (build/)
    #: --autotune-pairs / --autotune-max-pairs: pairs of processes per item instead of the protocol's (None: the
    #: protocol's)
    process_pairs: Optional[int] = None
    #: --autotune-max-pairs: ``process_pairs`` is a most, and an item stops once its CI reaches the target
    #: (measure/until_target.py)
    pairs_until_target: bool = False
    #: --autotune-strict-contract: a wrong answer beyond the contract refuses the item, whatever [contract].beyond
    strict_contract: bool = False
    #: the driver's list of processes on the GPU (measure/gpu_processes.py ``GpuProcessSource``); None: NVML where
    #: the device is CUDA (memory_holders.gpu_view). Tests give a fake one
    gpu_processes: Optional[Any] = None

    def timing_plan(self) -> TimingPlan:
        """The protocol's timing plan for this device; with ``--autotune-pairs=N``, N pairs of processes, each with
        the budget and the pair count one pair has under the protocol (the item's budget and ``max_pairs`` scaled by
        N / the protocol's pairs), and all N always run (docs/guide/precision.md)."""
        plan = self.protocol.timing_plan(self.device_spec.name)
        n = self.process_pairs
        if n is None or n == plan.process_pairs:
            return plan
        scale = n / plan.process_pairs
        return dataclasses.replace(plan, process_pairs=n, item_budget_s=plan.item_budget_s * scale,
                                   max_pairs=max(plan.min_pairs, int(plan.max_pairs * scale)))


@dataclass
class FlowVerdict:
    outcome: ItemOutcome
    result: Optional[KernelResult] = None
    quarantine: Optional[QuarantineRecord] = None


@dataclass
class ItemRun:
    """One item's local values, gathered as the flow goes."""

    spec: KernelItemSpec
    ctx: GateContext
    problem_src: SourceFile
    cand_src: Optional[SourceFile]
    problem: LoadedProblem
    sizes: dict
    init_seed: int
    golden: Golden
    started: float
    choice: Optional[BaselineChoice] = None
    baseline_src: Optional[SourceFile] = None
    #: arm -> its graph-capture probe, made in a sandbox that is not timed (the candidate's: the correctness one)
    probes: dict = field(default_factory=dict)
    boxes: dict = field(default_factory=dict)  # role -> Sandbox, for the wire statistics
    #: the device's free memory when the item's plan was made (memory_holders.settle's wait where the driver
    #: cannot name the processes)
    free_at_start: Optional[int] = None
    #: the item's memory plan as made at its start (``ctx.memory`` is its timing stage planned again on the memory
    #: free when each pair of timing sandboxes starts: item_memory.stage_start)
    memory_plan: Optional[Any] = None
    #: the spread its timing rounds derive input sets with, None: drawn (measure/input_sets.py)
    derive_spread: Optional[float] = None

    @property
    def baseline_name(self) -> str:
        return self.choice.baseline.name if self.choice else REFERENCE_BASELINE.name

    @property
    def baseline_sha(self) -> str:
        return self.choice.baseline_sha256 if self.choice else self.problem_src.sha256



def measurement(env: FlowEnv, item: ItemRun, ev: TimingEvidence) -> Measurement:
    """The accepted timing as the result carries it. Whether the CI reached its target is the run's summary's
    business (report/precision.py), not a warning per item; the item's own numbers go to ``details.precision``."""
    est = ev.estimate
    assert est is not None and item.choice is not None
    plan = env.timing_plan()
    pairs = [p.get("speedup") for p in ev.calibration.get("process_pairs") or []] or [est.speedup]
    item.ctx.details["precision"] = {
        "ci_rel_width": est.rel_width, "target": plan.ci_target_rel_width, "met": ev.ci_target_met,
        "pairs_of_processes": len(pairs), "planned": plan.process_pairs,
        "pair_log_speedups": [math.log(s) if s and s > 0 else None for s in pairs],
        "timing_stage_s": item.ctx.details.get("timing_stage_s")}
    return Measurement(
        n_pairs=est.n_pairs, candidate_s=est.candidate_s, baseline_s=est.baseline_s, speedup=est.speedup,
        ci_low=est.ci_low, ci_high=est.ci_high, ci_target_met=ev.ci_target_met,
        strawman_speedup=est.speedup * item.choice.gain_vs_reference, calls_per_sample=ev.calls_per_sample,
        stop_reason=ev.stop_reason)


def _median_per_call(ev: TimingEvidence) -> dict[str, Optional[float]]:
    """Each arm's median time per call over the timed samples (the k-invariance benchmark reads it)."""
    out: dict[str, Optional[float]] = {}
    for arm in ("A", "B"):
        v = sorted(s.seconds / r.k for r in ev.rounds for s in r.samples if s.arm == arm)
        out[arm] = v[len(v) // 2] if v else None
    return out


def details(item: ItemRun) -> dict:
    """What the report shows about how the item was measured (JSON-able)."""
    d = {**item.ctx.details, **item.ctx.evidence.as_json()}
    if item.ctx.candidate_sha256:  # a refusal's rejections row carries it (the study's treatment-delivery evidence)
        d["candidate_sha256"] = item.ctx.candidate_sha256
    wall = time.perf_counter() - item.started
    d["item_seconds"] = wall
    ev = item.ctx.timing
    if ev is not None:
        d["timing"] = {"calls_per_sample": ev.calls_per_sample, "rounds": len(ev.rounds), "mode": ev.mode,
                       "calibration": ev.calibration, "timed_s": ev.timed_s, "timing_s": ev.elapsed_s,
                       "prepare_s": sum(r.prepare_s for r in ev.rounds),
                       "sample_windows_s": sum((s.window_ns[1] - s.window_ns[0]) * 1e-9
                                               for r in ev.rounds for s in r.samples),
                       "cpu": ev.cpu, "stop_reason": ev.stop_reason, "overhead": ev.overhead,
                       "page_faults_in_samples": {arm: sum(max(0, s.page_faults) for r in ev.rounds for s in r.samples
                                                           if s.arm == arm) for arm in ("A", "B")},
                       "samples_with_page_faults": {arm: sum(1 for r in ev.rounds for s in r.samples
                                                             if s.arm == arm and s.page_faults > 0)
                                                    for arm in ("A", "B")},
                       "per_call_s": _median_per_call(ev)}
        d["duty_cycle"] = ev.timed_s / wall if wall > 0 else None
    d["wire"] = {role: box.chan.stats.as_dict() for role, box in item.boxes.items()}
    return jsonable(d)

def result(env: FlowEnv, item: ItemRun) -> KernelResult:
    ctx, spec = item.ctx, item.spec
    m = ctx.measurement
    assert m is not None
    # what the store needs is derived here, from the item itself, never from what a gate chose to leave behind
    seeds = ctx.seeds.seeds("correctness", env.protocol.seeds.count)
    ev = ctx.evidence
    breaker = f"released:{ev.breaker_release}" if ev.breaker_release is not None else "ok"
    cand_sha = item.cand_src.sha256 if item.cand_src else item.baseline_sha
    prov = env.item_provenance({
        "problem_sha256": item.problem_src.sha256, "candidate_sha256": cand_sha,
        "baseline_sha256": item.baseline_sha, "seeds": list(seeds), "sizes": item.sizes,
        "sandbox_pid": ctx.sandbox.pid if ctx.sandbox else 0, "device_index": env.device.index,
        "device_uuid": env.device.fingerprint().get("uuid"),
    })
    timing = ctx.timing
    prov["timing"] = {"calls_per_sample": m.calls_per_sample, "stop_reason": m.stop_reason,
                      "pairing": "cross-process", "process_pairs": ctx.details.get("precision", {}).get(
                          "pairs_of_processes"), "mode": timing.mode.get("decision") if timing else None,
                      "wall_clock": ev.wall_clock, "idle": ev.idle}
    return KernelResult(
        run_id=env.run_id, kind="kernel", nodeid=spec.nodeid, problem=spec.problem.name,
        problem_sha256=item.problem_src.sha256, candidate=spec.candidate.name, candidate_sha256=cand_sha,
        baseline=item.baseline_name, baseline_sha256=item.baseline_sha, device=spec.device,
        seeds=tuple(seeds), measurement=m, correctness="passed",
        probes=jsonable(ev.probes), integrity="passed", breaker=breaker,
        protocol_sha256=env.protocol.sha256, exploratory=env.exploratory, provenance=jsonable(prov),
        notes=tuple(ctx.warnings), contract=contract_record(jsonable(ev.as_json())),
    )


__all__ = ["FlowEnv", "FlowVerdict", "ItemRun", "measurement", "details", "result"]
