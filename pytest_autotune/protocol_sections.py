"""The sections of protocol.toml as frozen dataclasses, each field with its validation rule (``_f``: a default and
bounds or choices that :mod:`pytest_autotune.protocol`'s loader enforces), and :class:`TimingPlan`, the timing
numbers one device gets. The loader, the digest and the devices' plans live in :mod:`pytest_autotune.protocol`."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Optional


def _rule(*, ge: float | None = None, gt: float | None = None, le: float | None = None, choices=None):
    return {"ge": ge, "gt": gt, "le": le, "choices": choices}


def _f(default=dataclasses.MISSING, **rule):
    return field(default=default, metadata={"rule": _rule(**rule)})


@dataclass(frozen=True)
class ProtocolMeta:
    name: str = _f()
    version: str = _f()


@dataclass(frozen=True)
class SeedsSection:
    count: int = _f(ge=1)


@dataclass(frozen=True)
class TimingSection:
    order: str = _f(choices=("ABBA", "ABBA/BAAB"))
    warmup_calls: int = _f(ge=0)
    calibration_calls: int = _f(ge=1)
    min_pairs: int = _f(ge=2)
    max_pairs: int = _f(ge=2)
    check_every: int = _f(ge=1)
    min_sample_s: float = _f(ge=0.0)
    max_calls_per_sample: int = _f(ge=1)
    item_budget_s: float = _f(gt=0.0)
    cpu_threads: int = _f(ge=1)
    pin: str = _f(choices=("same-cpu", "none"))
    fresh_sandboxes: bool = _f()
    disable_gc: bool = _f()
    process_pairs: int = _f(ge=1)
    # optional (protocols 1-8: 0, k never re-checked against the timed rounds); measure/schedule.py _recheck
    k_recheck_ratio: float = _f(default=0.0, ge=0.0)
    # optional (protocols 1-8: 1); measure/sampling.py choose_calls_per_sample
    min_calls_per_sample: int = _f(default=1, ge=1)


@dataclass(frozen=True)
class StatisticsSection:
    ci_method: str = _f(choices=("bootstrap-percentile",))
    ci_level: float = _f(gt=0.0, le=0.9999)
    ci_target_rel_width: float = _f(gt=0.0)
    bootstrap_resamples: int = _f(ge=100)
    # optional (protocols 1-4 have no such key: "ratios"); measure/stats.py clustered_estimate
    pooling: Optional[str] = _f(default=None, choices=("process-medians", "ratios"))

    @property
    def pooling_rule(self) -> str:
        return self.pooling or "ratios"


@dataclass(frozen=True)
class CorrectnessSection:
    near_constant_rel_spread: float = _f(ge=0.0)
    recheck_delay_s: float = _f(ge=0.0)


@dataclass(frozen=True)
class Tolerance:
    rtol: float = _f(ge=0.0)
    atol: float = _f(ge=0.0)


@dataclass(frozen=True)
class BreakerSection:
    max_speedup: float = _f(gt=1.0)


@dataclass(frozen=True)
class ProbesSection:
    max_examples: int = _f(ge=0)
    shape_examples: int = _f(ge=0)
    deadline_s: float = _f(gt=0.0)
    # optional (protocols 1-5 have no such key: "any", every probe scale up to the dtype's largest value);
    # gates/probe_domain.py
    magnitudes: str = _f(default="any", choices=("any", "overflow-safe"))


@dataclass(frozen=True)
class SandboxSection:
    timeout_s: float = _f(gt=0.0)
    memory_mb: int = _f(ge=64)
    start_timeout_s: float = _f(gt=0.0)
    malloc: str = _f(choices=("steady", "reuse", "default"))
    thp: str = _f(choices=("off", "default"))
    isolation: str = _f(choices=("required", "preferred", "off"))
    max_processes: int = _f(ge=8)


@dataclass(frozen=True)
class IntegritySection:
    wall_clock_hidden_abs_s: float = _f(ge=0.0)
    wall_clock_hidden_rel: float = _f(ge=0.0, le=1.0)
    idle_cpu_per_command_s: float = _f(ge=0.0)
    idle_cpu_rel: float = _f(ge=0.0, le=1.0)
    prepare_cpu_max_ratio: float = _f(ge=1.0)
    prepare_cpu_abs_s: float = _f(ge=0.0)
    verify_rounds: int = _f(ge=0)
    max_new_threads: int = _f(ge=0)


@dataclass(frozen=True)
class CpuSection:
    cache_flush_factor: float = _f(ge=0.0)
    placement_span_kib: int = _f(default=0, ge=0)
    # optional (protocols 1-7 have no such keys: "drawn", every timed input set from get_inputs());
    # problems/derived.py
    input_sets: str = _f(default="drawn", choices=("drawn", "derived"))
    derived_spread: float = _f(default=0.0625, gt=0.0, le=0.5)
    # optional (protocols 1-7: 0, every timed output fingerprinted, and [integrity].verify_rounds rounds checked);
    # gates/timed_outputs.py
    prints_per_group: int = _f(default=0, ge=0)
    verify_rounds: Optional[int] = _f(default=None, ge=0)
    # optional (protocols 1-7: 0, the pooled CI from the pairs of processes alone); measure/stats.py
    process_offset_sd: float = _f(default=0.0, ge=0.0, le=0.5)
    # optional (protocols 1-8: 0, a round's inputs left in the last-level cache where they fit); measure/devices/cpu.py
    llc_flush_factor: float = _f(default=0.0, ge=0.0)


@dataclass(frozen=True)
class CudaSection:
    l2_flush_factor: int = _f(ge=2)
    graph_below_s: float = _f(ge=0.0)
    event_host_max_ratio: float = _f(ge=1.0)
    min_sample_s: float = _f(ge=0.0)
    max_calls_per_sample: int = _f(ge=1)
    item_budget_s: float = _f(gt=0.0)
    ci_target_rel_width: float = _f(gt=0.0)
    # optional (protocols 1-4 have no such key and meant [timing].process_pairs on every device)
    process_pairs: Optional[int] = _f(default=None, ge=1)
    # optional (protocols 1-8: "off", no hold, a sample's time its event time); measure/devices/cuda/head_start.py
    head_start: str = _f(default="off", choices=("off", "spin"))
    head_start_max_s: float = _f(default=0.003, gt=0.0, le=0.1)
    # optional (protocols 1-9: 0, a sample of min_sample_s of the baseline's calls whatever the candidate's speed);
    # measure/sampling.py choose_calls_per_sample
    fast_arm_sample_s: float = _f(default=0.0, ge=0.0, le=1.0)


@dataclass(frozen=True)
class DevicesSection:
    cpu: CpuSection = _f()
    cuda: CudaSection = _f()


@dataclass(frozen=True)
class TimingPlan:
    """The timing schedule's numbers for one device: ``[timing]`` and ``[statistics]``, with the device's own
    section overriding what it sets (``[devices.cuda]`` samples a millisecond of GPU time and aims at a 1% CI)."""

    order: str
    warmup_calls: int
    calibration_calls: int
    min_pairs: int
    max_pairs: int
    check_every: int
    min_sample_s: float
    max_calls_per_sample: int
    item_budget_s: float
    ci_target_rel_width: float
    process_pairs: int
    #: fewest pairs behind a stop on the CI target (a share of the item's pairs can be 2-3, and a bootstrap of so
    #: few ratios can read narrow by chance); 0: min_pairs
    ci_stop_min_pairs: int = 0
    #: a timing group's k sets derived from one draw with this spread (problems/derived.py); None: all drawn
    derive_spread: Optional[float] = None
    #: timed outputs fingerprinted per group and round, chosen after the round (0: all of them)
    prints_per_group: int = 0
    #: the between-process offset's standard deviation the pooled CI allows for at least (0: none)
    process_offset_sd: float = 0.0
    #: a k that the baseline's timed per-call time would choose more than this many times larger or smaller than
    #: the k in use is re-planned once, then refused (0: never re-checked)
    k_recheck_ratio: float = 0.0
    #: the fewest calls a sample holds, whatever the calls' length (the memory bound still caps it)
    min_calls_per_sample: int = 1
    #: a sandbox's memory limit ([sandbox].memory_mb): where a device's tensors live in the sandbox's own memory, k's
    #: memory bound (measure/sampling.py host_memory_cap); 0: none
    sandbox_memory_bytes: int = 0
    #: the sample of an arm up to ``max_speedup`` times faster than the baseline holds at least this long (0: no
    #: such floor; [devices.cuda].fast_arm_sample_s, protocol 10)
    fast_arm_sample_s: float = 0.0
    #: [breaker].max_speedup: the most an arm can be faster than the baseline and still be a result
    max_speedup: float = 0.0

    @property
    def sample_target_s(self) -> float:
        """How long the baseline's sample is made (``k`` from its calls alone): ``min_sample_s``, and long enough
        that an arm ``max_speedup`` times faster still has ``fast_arm_sample_s`` -- the same ``k`` whichever arm is
        faster (docs/design/protocol.md, "The sample's length")."""
        return max(self.min_sample_s, self.max_speedup * self.fast_arm_sample_s)


@dataclass(frozen=True)
class BarsSection:
    fast_p_thresholds: tuple[float, ...] = _f()
    level1_min_correct_fraction: float = _f(ge=0.0, le=1.0)
    level1_min_median_speedup: float = _f(gt=0.0)


@dataclass(frozen=True)
class BandsSection:
    saturation: float = _f(ge=0.0)
    anchoring: float = _f(ge=0.0)


@dataclass(frozen=True)
class MemorySection:
    """Device memory planned across an item's processes (measure/memory.py); optional (protocols 1-5: defaults)."""
    headroom: float = _f(default=0.05, ge=0.0, le=0.5)
    process_overhead_mb: int = _f(default=1024, ge=0)


@dataclass(frozen=True)
class BuildSection:
    """The build stage of compiled candidates (docs/guide/compiled-candidates.md): the budget of the one jailed sandbox
    an item's compilers run in. Optional (protocols 1-8: these defaults)."""
    timeout_s: float = _f(default=600.0, gt=0.0)
    memory_mb: int = _f(default=8192, ge=256)
    max_processes: int = _f(default=512, ge=8)
    max_artifact_mb: int = _f(default=512, ge=1)


@dataclass(frozen=True)
class AccuracySection:
    """How a floating output is judged (gates/accuracy.py; docs/design/accuracy.md). Optional (protocols 1-9:
    ``"tolerance"``, the dtype's rtol/atol against the reference alone)."""

    #: "float64-oracle": the candidate's error against the reference run in float64 may be at most ``multiplier``
    #: times the reference's own error on the same inputs, plus ``floor_ulps`` units (the output dtype's epsilon
    #: times the oracle's magnitude, or the op's sensitivity to its inputs' rounding where that is larger), for the
    #: root-mean-square error and, with ``max_*``, the largest; "tolerance": ``[tolerance.<dtype>]`` against the
    #: reference
    rule: str = _f(default="tolerance", choices=("tolerance", "float64-oracle"))
    multiplier: float = _f(default=100.0, ge=1.0)
    floor_ulps: float = _f(default=8.0, ge=0.0)
    #: the same rule for the single worst element
    max_multiplier: float = _f(default=200.0, ge=1.0)
    max_floor_ulps: float = _f(default=16.0, ge=0.0)


@dataclass(frozen=True)
class ContractSection:
    """What inputs a candidate answers for (problems/contract.py; docs/guide/contract.md). Optional (protocols 1-9:
    every layout probed was part of the contract, and every probe that failed refused)."""

    #: layouts a problem that declares none (no ``AUTOTUNE_LAYOUTS``) is judged on: "as-produced", the layouts its
    #: ``get_inputs()`` produces; "all", every layout the probes know
    undeclared_layouts: str = _f(default="all", choices=("all", "as-produced"))
    #: what a probe beyond the contract that finds a wrong answer does: "finding" (reported on the item, never a
    #: refusal) or "refuse" (``--autotune-strict-contract`` makes it "refuse" for one run)
    beyond: str = _f(default="refuse", choices=("finding", "refuse"))


@dataclass(frozen=True)
class KernelBenchSection:
    """KernelBench's own correctness check, recorded beside the gates' verdict (gates/kernelbench.py). It never
    refuses. Optional (protocols 1-9: ``trials = 0``, not recorded)."""

    trials: int = _f(default=0, ge=0)
    #: the seed KernelBench derives its trial seeds from (``torch.manual_seed(seed)``, then ``torch.randint``)
    seed: int = _f(default=42, ge=0)
    #: ``torch.allclose(ref, out, atol=t, rtol=t)`` with t by the output dtype (KernelBench's
    #: get_tolerance_for_precision); ``v0_tolerance``: the 1e-2 of KernelBench v0 and v0.1, when the public
    #: leaderboard's kernels were checked
    float32_tolerance: float = _f(default=1e-4, gt=0.0)
    half_tolerance: float = _f(default=1e-2, gt=0.0)
    v0_tolerance: float = _f(default=1e-2, gt=0.0)


@dataclass(frozen=True)
class StudiesSection:
    """Studies (docs/guide/studies.md): the usability floor of an arm and the plumbing-audit thresholds."""

    min_usable_fraction: float = _f(ge=0.0, le=1.0)
    max_truncation_rate: float = _f(ge=0.0, le=1.0)
    max_error_rate: float = _f(ge=0.0, le=1.0)
    max_timeout_rate: float = _f(ge=0.0, le=1.0)
    call_timeout_s: float = _f(gt=0.0)


@dataclass(frozen=True)
class SurfaceSection:
    modifiable: tuple[str, ...] = _f()


@dataclass(frozen=True)
class EnginesSection:
    """Serving-engine items (docs/guide/engines.md)."""

    launch_pairs: int = _f(ge=1)
    windows_per_launch: int = _f(ge=1)
    warmup_windows: int = _f(ge=0)
    quality_prompts: int = _f(ge=1)
    quality_max_tokens: int = _f(ge=1)
    quality_concurrency: int = _f(ge=1)
    quality_min_agreement: float = _f(ge=0.0, le=1.0)
    max_error_rate: float = _f(ge=0.0, le=1.0)
    launch_timeout_s: float = _f(gt=0.0)
    stop_grace_s: float = _f(gt=0.0)
    request_timeout_s: float = _f(gt=0.0)
    metrics_interval_s: float = _f(gt=0.0)


__all__ = ["ProtocolMeta", "SeedsSection", "TimingSection", "StatisticsSection", "CorrectnessSection", "Tolerance", "BreakerSection", "ProbesSection", "SandboxSection", "IntegritySection", "CpuSection", "CudaSection", "DevicesSection", "TimingPlan", "BarsSection", "BandsSection", "MemorySection", "BuildSection", "StudiesSection", "SurfaceSection", "EnginesSection",
           "AccuracySection", "ContractSection", "KernelBenchSection"]
