"""The paired timing schedule, driven by the controller across two sandboxes (docs/architecture.md).

The baseline arm ``A`` runs in a sandbox that never imported the candidate; the candidate arm ``B`` in its own.
Round ``r``: both sandboxes build the same two input groups ``p1`` and ``p2`` (``k`` distinct input sets each, a
stream from a seed the controller draws now: problems/inputs.py ``materialize_stream``) at once; then the controller asks for four samples, one at a time, alternating
``A(p1) B(p1) B(p2) A(p2)`` (ABBA) and ``B(p1) A(p1) A(p2) B(p2)`` (BAAB) from round to round, so each arm takes
each position equally often. Every input set is seen exactly once by each arm, so no arm can replay an earlier
answer. Each sample's window on the controller's clock, the sandbox's own stamps, and the CPU both sandboxes used
during it (read from the kernel: :mod:`.procstat`) are kept for the integrity gates. The fingerprints of the
round's outputs are asked for with the next round's inputs, at positions the controller chooses only then.
Rounds go on until the CI is narrow enough, ``max_pairs`` is reached or the item's budget is spent.
"""

from __future__ import annotations

import os
import secrets
import time
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Optional

from ..protocol import Protocol, TimingPlan
from ..sandbox.runner import Sandbox
from ..seeds import SeedSource
from .helper_watch import HelperWatch
from .procstat import CpuWatch
from .sampling import choose_calls_per_sample, decide_timing_mode, memory_cap
from .stats import PairedEstimate, paired_estimate

#: rounds between two tamper snapshots during timing (one more is taken after the last round)
TAMPER_EVERY = 8
ARM_ROLES = {"A": "baseline", "B": "candidate"}


class TimingRefused(Exception):
    """The sandbox misbehaved during timing in a way that is the candidate's doing (gate ``timing``, or
    ``integrity`` when the sandbox itself refused to go on: a torch mode left pushed, a subclass output)."""

    def __init__(self, message: str, gate: str = "timing") -> None:
        super().__init__(message)
        self.gate = gate


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
        k = self.calls_per_sample
        base, cand = [], []
        for r in self.rounds:
            for a, b in zip(r.baseline, r.candidate):
                base.append(a.seconds / k)
                cand.append(b.seconds / k)
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


class _Driver:
    """Sends the schedule's requests and keeps the CPU books of both sandboxes."""

    def __init__(self, boxes: dict[str, Sandbox], sample_cpus: Optional[list[int]]) -> None:
        self.boxes = boxes
        self.watch = CpuWatch({arm: box.pid for arm, box in boxes.items()})
        self.commands = {arm: 0 for arm in boxes}
        self.sample_cpus = set(sample_cpus or [])
        self.all_cpus = set(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else set()
        self.repin_errors = 0
        self.affinity = {arm: _affinity(box.pid) for arm, box in boxes.items()}
        # the candidate's processes and the GPU's, before every sample of either arm and after every round
        self.helpers = HelperWatch(boxes["B"], boxes["A"])

    def _pin(self, cpus: set) -> None:
        """Both sandboxes onto ``cpus`` (the controller may; a sandbox could not undo it under the jail's filter)."""
        if not cpus or not self.sample_cpus:
            return
        for box in self.boxes.values():
            try:
                os.sched_setaffinity(box.pid, cpus)
            except OSError:
                self.repin_errors += 1

    def between_rounds_cpus(self) -> set:
        """Where both sandboxes work between samples (a round's release, the next round's inputs): every CPU the
        controller may use except the samples' own, unless that is all there is.

        Why not the samples' CPU too: the sandbox woken first (the baseline's, asked first) stayed on it and the
        other moved away, so only the baseline's inputs and outputs were written in the cache of the CPU that
        then timed them. Measured on a 16-core host (2 MiB L2 a core), the baseline built its inputs there in
        ~100% of rounds and the candidate in 0%, and the bundled Level-1 A/A on the CPU read a median 1.039 (8 of
        8 items above 1, 3 of 8 CIs containing 1.0); with both arms kept off it, 1.003 (4 of 8 above 1, 8 of 8
        CIs containing 1.0). docs/harness.md, "A/A bias: where the rounds were built"."""
        return (self.all_cpus - self.sample_cpus) or self.all_cpus

    def both(self, msgs: dict[str, dict], phase: str, spread: bool = False) -> dict[str, dict]:
        """The same kind of request to both sandboxes at once. ``spread``: they may use every CPU but the samples'
        meanwhile (:meth:`between_rounds_cpus`; building inputs in parallel) and are pinned back to the samples'
        CPU when both are done."""
        arms = list(msgs)
        if spread:
            self._pin(self.between_rounds_cpus())
        self.watch.begin(*arms, label=phase)
        for arm in arms:
            self.boxes[arm].send(msgs[arm], phase=phase)
            self.commands[arm] += 1
        replies, deltas = {}, {}
        for arm in arms:
            replies[arm] = self.boxes[arm].receive(phase=phase)
            deltas[arm] = self.watch.end(arm)
        if spread:
            self._pin(self.sample_cpus)
        for arm, reply in replies.items():
            if not reply.get("ok"):
                raise TimingRefused(f"{phase} failed in the {ARM_ROLES[arm]} sandbox: {reply.get('error')}",
                                    "integrity" if reply.get("refusal") else "timing")
            delta = deltas[arm]
            reply["_cpu_s"] = None if delta is None else delta[0] * 1e-9
            # CPU of the sandbox's threads other than the main one (the harness works on the main thread)
            reply["_other_cpu_s"] = None if delta is None else max(0, delta[0] - delta[1]) * 1e-9
        return replies

    def sample(self, arm: str, group: str, position: int, phase: str) -> SampleRecord:
        box = self.boxes[arm]
        self.helpers.before_sample(arm)
        # the CPUs a sandbox may run on are the controller's to choose: read from the kernel before every sample
        want = self.sample_cpus or self.affinity[arm]
        got = _affinity(box.pid)
        if want and got and got != want:
            raise TimingRefused(f"the {ARM_ROLES[arm]} sandbox runs on CPUs {sorted(got)}, not {sorted(want)}: it "
                                "changed its CPU affinity (a quieter core is a speedup nobody else gets)", "integrity")
        self.watch.begin(arm, label=f"{phase} sample")
        t0 = time.perf_counter_ns()
        reply = box.request({"cmd": "sample", "group": group}, phase=phase)
        t1 = time.perf_counter_ns()
        delta = self.watch.end(arm, sampling=arm)
        self.commands[arm] += 1
        if not reply.get("ok"):
            raise TimingRefused(f"a timed {ARM_ROLES[arm]} sample failed: {reply.get('error')}",
                                "integrity" if reply.get("refusal") else "timing")
        stamps = reply.get("stamps_ns")
        if not (isinstance(stamps, list) and len(stamps) == 2 and all(type(v) is int for v in stamps)):
            stamps = [0, 0]
        try:
            secs, host = float(reply["s"]), float(reply["host_s"])
        except (KeyError, TypeError, ValueError):
            raise TimingRefused(f"the {ARM_ROLES[arm]} sandbox returned a malformed sample") from None
        cpu, main, wait = (None, None, None) if delta is None else (v * 1e-9 for v in delta)
        return SampleRecord(arm, group, position, secs, host, (t0, t1), (stamps[0], stamps[1]), cpu, main, wait,
                            int(reply.get("new_threads", 0) or 0))


def _affinity(pid: int) -> set:
    try:
        return set(os.sched_getaffinity(pid))
    except (OSError, AttributeError):
        return set()


def _calibrate(drv: _Driver, warm: dict, plan: TimingPlan, graph_below_s: float,
               probes: dict[str, dict]) -> tuple[int, dict, dict]:
    if probes:  # an arm's capture probe ran in another sandbox: none in this one
        drv.both({arm: {"cmd": "configure", "timing": {"capture_probes": False}} for arm in probes}, "configure")
    cal = drv.both({arm: {"cmd": "calibrate", "warmup": warm} for arm in drv.boxes}, "warm-up")
    per_call = min(float(c["per_call_s"]) for c in cal.values())
    infos = {arm: c.get("timing_info") or {} for arm, c in cal.items()}
    infos.update(probes)
    mode = decide_timing_mode(infos, graph_below_s)
    cap = memory_cap(cal, graphs=bool(mode.get("graphs")))
    k = choose_calls_per_sample(per_call, plan, cap)
    conf = drv.both({arm: {"cmd": "configure", "k": k, "timing": mode} for arm in drv.boxes}, "configure")
    calibration: dict[str, Any] = {
        arm: {"per_call_s": c["per_call_s"], "single_call_s": c.get("single_call_s"), "memory": c.get("memory")}
        for arm, c in cal.items()}
    calibration["k_memory_cap"] = cap
    infos = {arm: c.get("timing_info") or {} for arm, c in conf.items()}
    return k, calibration, {"decision": mode, "sandboxes": infos}


def _warm_round(drv: _Driver, seeds: SeedSource, k: int) -> float:
    """An untimed round of k-call samples of both arms; the fastest sample's seconds."""
    warm_round = {arm: {"cmd": "prepare", "p1": {"seed": seeds.seed("warm-round", 0), "count": k},
                        "p2": {"seed": seeds.seed("warm-round", 1), "count": k}} for arm in drv.boxes}
    drv.both({arm: {"cmd": "release", "fingerprint": None} for arm in drv.boxes}, "timing (warm-up round)",
             spread=True)
    drv.both(warm_round, "timing (warm-up round)", spread=True)
    return min(drv.sample(arm, group, 0, "timing (warm-up round)").seconds
               for arm, group in (("A", "p1"), ("B", "p1"), ("B", "p2"), ("A", "p2")))


def run_paired_timing(candidate: Sandbox, baseline: Sandbox, proto: Protocol, plan: TimingPlan, seeds: SeedSource,
                      *, stats_seed: int, graph_below_s: float = 0.0, budget_scale: float = 1.0,
                      sample_cpus: Optional[list[int]] = None, probes: Optional[dict[str, dict]] = None) -> TimingEvidence:
    """``sample_cpus``: the CPU(s) both sandboxes share for samples ([timing].pin); while they release a round and
    build the next one's inputs they may use every CPU but those (``_Driver.between_rounds_cpus``).
    ``probes``: arm -> that arm's graph-capture probe, made in a sandbox that is not timed (then its timing sandbox
    makes none). Both arms' probes made elsewhere leave both timing sandboxes with the same history: with only the
    candidate's, the baseline's timing sandbox alone had test-captured graphs, and the 4 us A/A yardstick read
    0.998-0.999 in four of four pairs of processes on the H200, and with both probes outside 0.998-1.000, every CI
    containing 1.0 (docs/results-h200.md, "The 4 us yardstick and the baseline's probe")."""
    t_start = time.perf_counter()
    drv = _Driver({"A": baseline, "B": candidate}, sample_cpus)

    warm = {"seed": seeds.seed("warmup"), "count": max(1, plan.warmup_calls + plan.calibration_calls)}
    k, calibration, mode = _calibrate(drv, warm, plan, graph_below_s, dict(probes or {}))
    # one untimed round first: each sandbox meets its inputs, its k-call graph is captured (on CUDA), and nothing
    # done once per process lands in a sample that counts
    warm_per_call = _warm_round(drv, seeds, k) / k
    cap = calibration.get("k_memory_cap")
    if k * warm_per_call < plan.min_sample_s / 2 and choose_calls_per_sample(warm_per_call, plan, cap) > k:
        # calibration ran cold or under load and over-estimated a call: samples this short would leave the harness's
        # own per-sample work (and the wall-clock rule's noise) as large as the calls. k again from the warm round.
        calibration["rederived_from_warm_round"] = {"k_calibrated": k, "per_call_s": warm_per_call}
        k = choose_calls_per_sample(warm_per_call, plan, cap)
        conf = drv.both({arm: {"cmd": "configure", "k": k, "timing": mode["decision"]} for arm in drv.boxes},
                        "configure")
        mode = {**mode, "sandboxes": {arm: c.get("timing_info") or {} for arm, c in conf.items()}}
        _warm_round(drv, seeds, k)
    ev = TimingEvidence(calls_per_sample=k, calibration=calibration, mode=mode)
    budget = plan.item_budget_s * budget_scale
    n_seed = 0
    prints_of: Optional[RoundRecord] = None
    while True:
        r_index = len(ev.rounds)
        p1 = {"seed": seeds.seed("timing", n_seed), "count": k}
        p2 = {"seed": seeds.seed("timing", n_seed + 1), "count": k}
        n_seed += 2
        fp = {"positions_seed": secrets.randbits(63)} if prints_of is not None else None
        t_prep = time.perf_counter()
        # the last round's outputs are fingerprinted and freed first (the candidate's finalizers may run there),
        # then the inputs are built: only that step is the same work in both sandboxes, and compared.
        # Both sandboxes read their outputs, though only the candidate's prints are checked: the same work between
        # rounds in both arms leaves the same cache and allocator state to the next round's calls (the two
        # asymmetries found behind a CPU A/A of 1.039; between_rounds_cpus has the other)
        rel = drv.both({arm: {"cmd": "release", "fingerprint": fp,
                              "tamper": arm == "B" and r_index % TAMPER_EVERY == 0} for arm in drv.boxes},
                       "timing (release)", spread=True)
        t_rel = time.perf_counter()
        ev.add_overhead("release", t_rel - t_prep, rel)
        prep = drv.both({arm: {"cmd": "prepare", "p1": p1, "p2": p2} for arm in drv.boxes}, "timing (prepare)",
                        spread=True)
        ev.add_overhead("prepare", time.perf_counter() - t_rel, prep)
        if prints_of is not None:
            prints_of.prints = rel["B"].get("prints") or []
        ev.tamper += rel["B"].get("tamper", [])
        order = "BAAB" if (plan.order == "ABBA/BAAB" and r_index % 2 == 1) else "ABBA"
        seq = [(order[0], "p1"), (order[1], "p1"), (order[2], "p2"), (order[3], "p2")]
        samples = tuple(drv.sample(arm, group, pos, "timing") for pos, (arm, group) in enumerate(seq))
        rec = RoundRecord(r_index, order, p1, p2, samples,
                          prepare_cpu_s={arm: prep[arm]["_cpu_s"] for arm in prep},
                          prepare_other_cpu_s={arm: prep[arm]["_other_cpu_s"] for arm in prep},
                          release_cpu_s={arm: rel[arm]["_cpu_s"] for arm in rel},
                          prepare_s=time.perf_counter() - t_prep - sum(
                              (s.window_ns[1] - s.window_ns[0]) * 1e-9 for s in samples),
                          helper_processes=drv.helpers.after_round())
        ev.rounds.append(rec)
        ev.timed_s += sum(s.seconds for s in samples)
        prints_of = rec
        n_pairs = 2 * len(ev.rounds)
        elapsed = time.perf_counter() - t_start
        if (n_pairs >= max(plan.min_pairs, plan.ci_stop_min_pairs)
                and (n_pairs - plan.min_pairs) % plan.check_every < 2):
            ev.estimate = _estimate(ev, proto, stats_seed)
            if ev.estimate.rel_width <= plan.ci_target_rel_width:
                ev.ci_target_met = True
                ev.stop_reason = f"CI narrower than {plan.ci_target_rel_width:.1%} after {n_pairs} pairs"
                break
        if n_pairs >= plan.max_pairs:
            ev.stop_reason = f"max_pairs ({plan.max_pairs}) reached"
            break
        if elapsed >= budget and n_pairs >= plan.min_pairs:
            ev.stop_reason = f"item budget of {budget:g} s spent after {n_pairs} pairs"
            break
    last = drv.both({"A": {"cmd": "release", "fingerprint": None},
                     "B": {"cmd": "fingerprint", "positions_seed": secrets.randbits(63), "tamper": True}},
                    "timing (last outputs)", spread=True)
    if prints_of is not None:
        prints_of.prints = last["B"].get("prints") or []
    ev.tamper += last["B"].get("tamper", [])
    drv.watch.checkpoint()
    ev.cpu = {arm: vars(acct) for arm, acct in drv.watch.accounts.items()}
    ev.commands = dict(drv.commands)
    ev.helpers = drv.helpers.report()
    ev.mode["repin_errors"] = drv.repin_errors
    ev.estimate = _estimate(ev, proto, stats_seed)
    if not ev.ci_target_met and ev.estimate.rel_width <= plan.ci_target_rel_width:
        ev.ci_target_met = True
    ev.elapsed_s = time.perf_counter() - t_start
    return ev


def _estimate(ev: TimingEvidence, proto: Protocol, stats_seed: int) -> PairedEstimate:
    base, cand = ev.pairs()
    st = proto.statistics
    try:
        return paired_estimate(base, cand, level=st.ci_level, resamples=st.bootstrap_resamples, seed=stats_seed)
    except ValueError as e:
        raise TimingRefused(str(e)) from None


__all__ = ["run_paired_timing", "pooled_overhead", "TimingEvidence", "RoundRecord", "SampleRecord", "TimingRefused",
           "choose_calls_per_sample", "decide_timing_mode", "memory_cap"]
