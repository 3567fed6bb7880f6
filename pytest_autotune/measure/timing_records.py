"""What a paired timing run gathers (measure/schedule.py): each sample as the sandbox reported it and the controller
saw it, each round, and the evidence of a whole run -- the records the integrity gates and the report read."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple, Optional

from .stats import PairedEstimate

ARM_ROLES = {"A": "baseline", "B": "candidate"}


class TimingRefused(Exception):
    """The sandbox misbehaved during timing in a way that is the candidate's doing (gate ``timing``, or
    ``integrity`` when the sandbox itself refused to go on: a torch mode left pushed, a subclass output); with
    ``verdict="error"``, timing could not go on for a reason that is nobody's doing in particular (the machine's
    speed changed under the item: measure/schedule.py ``_recheck``)."""

    def __init__(self, message: str, gate: str = "timing", verdict: str = "rejected") -> None:
        super().__init__(message)
        self.gate = gate
        self.verdict = verdict


class SampleRecord(NamedTuple):
    """One sample: ``k`` calls of one arm on one input group, as the sandbox reported it and the controller saw it."""

    arm: str  # "A" (baseline) | "B" (candidate)
    group: str  # "p1" | "p2"
    position: int  # 0..3 within the round
    seconds: float  # the device's own measure (host clock on the CPU, events on CUDA)
    host_seconds: float  # host clock around the sample, device-wide synchronisation included
    window_ns: tuple[int, int]  # the controller's perf_counter_ns when it asked and when the answer came
    stamps_ns: tuple[int, int]  # the sandbox's perf_counter_ns around its timed region (same system clock)
    cpu_s: Optional[float]  # CPU of the sampling sandbox (all threads) during the window, from the kernel
    main_cpu_s: Optional[float]  # ... of its main thread
    main_wait_s: Optional[float]  # time its main thread was runnable but waiting for a CPU (preempted)
    new_threads: int
    page_faults: int = -1  # the sandbox's page faults during the sample (-1: not reported)


@dataclass
class RoundRecord:
    index: int
    order: str  # "ABBA" | "BAAB"
    recipes_p1: dict  # stream recipes {"seed", "count"}: the k input sets of each group
    recipes_p2: dict
    samples: tuple[SampleRecord, ...]  # in the order they ran
    prints: list = field(default_factory=list)  # candidate output fingerprints: [B(p1) calls..., B(p2) calls...]
    #: CPU seconds each sandbox used building this round's inputs (the same work in both)
    prepare_cpu_s: dict = field(default_factory=dict)
    #: ... and fingerprinting and freeing the last round's outputs (not the same work: other outputs, other heaps)
    release_cpu_s: dict = field(default_factory=dict)
    #: ... of that (prepare) CPU, what threads other than the main one used: the harness builds inputs on the main
    #: thread, so this is nobody's work but the candidate's
    prepare_other_cpu_s: dict = field(default_factory=dict)
    #: the controller's wall time for both steps (both sandboxes at once)
    prepare_s: float = 0.0
    helper_processes: int = 0
    #: half-rounds (measure/memory.py groups_held = 1): the candidate's fingerprints of p1's outputs, taken when
    #: p1 was freed in the middle of the round; ``prints`` begins with them
    mid_prints: list = field(default_factory=list)
    #: the calls (p1's 0..k-1, then p2's) whose outputs ``prints`` fingerprint, in order; None: every call
    #: (``[devices.cpu].prints_per_group``: the controller chose a few of each group after the round)
    print_calls: Optional[list] = None
    mid_calls: list = field(default_factory=list)

    @property
    def k(self) -> int:
        """Calls in each sample of this round (every round of a pair of processes has the protocol's ``k`` unless
        the schedule re-planned it: measure/schedule.py ``_recheck``)."""
        return int(self.recipes_p1["count"])

    def slot(self, arm: str, group: str) -> SampleRecord:
        return next(s for s in self.samples if s.arm == arm and s.group == group)

    @property
    def baseline(self) -> tuple[SampleRecord, SampleRecord]:
        return self.slot("A", "p1"), self.slot("A", "p2")

    @property
    def candidate(self) -> tuple[SampleRecord, SampleRecord]:
        return self.slot("B", "p1"), self.slot("B", "p2")


@dataclass
class TimingEvidence:
    calls_per_sample: int
    rounds: list[RoundRecord] = field(default_factory=list)
    estimate: Optional[PairedEstimate] = None
    ci_target_met: bool = False
    stop_reason: str = ""
    calibration: dict = field(default_factory=dict)
    mode: dict = field(default_factory=dict)
    tamper: list[str] = field(default_factory=list)
    elapsed_s: float = 0.0
    #: CPU accounts of both sandboxes ("A", "B") over the whole timing phase (busy / idle / during the other arm)
    cpu: dict = field(default_factory=dict)
    #: controller requests sent to each sandbox during timing
    commands: dict = field(default_factory=dict)
    #: seconds spent in timed samples (both arms), for the duty cycle
    timed_s: float = 0.0
    #: where the time between samples goes: the controller's wall per request kind, and each sandbox's own steps
    #: (``steps_s`` of its replies), summed over the rounds -- the duty cycle's other side
    overhead: dict = field(default_factory=dict)
    #: helper processes of the candidate and processes on the GPU, as the controller saw them (HelperWatch.report)
    helpers: dict = field(default_factory=dict)

    def add_overhead(self, kind: str, wall_s: float, replies: dict[str, dict]) -> None:
        book = self.overhead.setdefault(kind, {"wall_s": 0.0, "n": 0})
        book["wall_s"] += wall_s
        book["n"] += 1
        for arm, reply in replies.items():
            steps = reply.get("steps_s")
            if isinstance(steps, dict):
                mine = book.setdefault(arm, {})
                for step, v in steps.items():
                    if isinstance(v, (int, float)) and not isinstance(v, bool):
                        mine[str(step)] = mine.get(str(step), 0.0) + float(v)

    def pairs(self) -> tuple[list[float], list[float]]:
        """Per-call (baseline, candidate) times of each pair: (A(p1), B(p1)) and (A(p2), B(p2)) of every round."""
        base, cand = [], []
        for r in self.rounds:
            for a, b in zip(r.baseline, r.candidate):
                base.append(a.seconds / r.k)
                cand.append(b.seconds / r.k)
        return base, cand


def pooled_overhead(runs: list[TimingEvidence]) -> dict:
    """The ``overhead`` books of several timing runs (pairs of processes), added up."""
    total: dict = {}
    for ev in runs:
        for kind, book in ev.overhead.items():
            mine = total.setdefault(kind, {})
            for key, v in book.items():
                if isinstance(v, dict):
                    arm = mine.setdefault(key, {})
                    for step, x in v.items():
                        arm[step] = arm.get(step, 0.0) + x
                else:
                    mine[key] = mine.get(key, 0) + v
    return total


__all__ = ["ARM_ROLES", "TimingRefused", "SampleRecord", "RoundRecord", "TimingEvidence", "pooled_overhead"]
