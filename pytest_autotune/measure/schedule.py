"""The paired timing schedule, driven by the controller across two sandboxes (docs/architecture.md).

The baseline arm ``A`` runs in a sandbox that never imported the candidate; the candidate arm ``B`` in its own.
Round ``r``: both sandboxes build the same two input groups ``p1`` and ``p2`` (``k`` distinct input sets each, a
stream from a seed the controller draws now: problems/inputs.py ``materialize_stream``) at once; then the
controller asks for four samples, one at a time, alternating ``A(p1) B(p1) B(p2) A(p2)`` (ABBA) and
``B(p1) A(p1) A(p2) B(p2)`` (BAAB) from round to round, so each arm takes each position equally often. Every input
set is seen exactly once by each arm, so no arm can replay an earlier answer. Each sample's window on the
controller's clock, the sandbox's own stamps, and the CPU both sandboxes used during it (read from the kernel:
:mod:`.procstat`) are kept for the integrity gates. The fingerprints of the round's outputs are asked for with the
next round's inputs, at positions the controller chooses only then. Rounds go on until the CI is narrow enough,
``max_pairs`` is reached or the item's budget is spent.

Where the item's memory plan holds one input group at a time (``groups_held = 1``, measure/memory.py: inputs of
KernelBench's published sizes), a round is two half-rounds: both sandboxes build ``p1``, both arms sample it,
both fingerprint and free it (at positions drawn only then) and build ``p2``, both arms sample that. The order of
the samples, the sets and what each arm sees are those of a whole round.
"""

from __future__ import annotations

import dataclasses
import secrets
import statistics
import time
from typing import Any, Optional

from ..protocol import Protocol, TimingPlan
from ..sandbox.runner import Sandbox
from ..seeds import SeedSource
from .memory import UNBUDGETED, MemoryPlan
from .sampling import (
    KOverride,
    choose_calls_per_sample,
    decide_head_start,
    decide_timing_mode,
    host_memory_cap,
    k_disagrees,
    memory_cap,
    sample_length,
)
from .schedule_driver import ScheduleDriver
from .stats import PairedEstimate, clustered_estimate, paired_estimate, with_process_offsets
from .timing_records import (
    ARM_ROLES,
    RoundRecord,
    SampleRecord,
    TimingEvidence,
    TimingRefused,
    pooled_overhead,
)

#: rounds between two tamper snapshots during timing (one more is taken after the last round)
TAMPER_EVERY = 8
#: timed rounds between two re-checks of k against the baseline's timed samples (:func:`_recheck`)
RECHECK_ROUNDS = 4


#: steady calibration samples of each arm, each on fresh input sets; the fastest counts
STEADY_SAMPLES = 3
#: cold single-call samples of each arm during calibration (on CUDA also test-captured as graphs)
SINGLE_SAMPLES = 3


def calibration_message(seeds: SeedSource, plan: TimingPlan, memory: MemoryPlan) -> dict[str, Any]:
    """What both arms calibrate on: warm-up sets, single-call sets and ``STEADY_SAMPLES`` groups of
    ``calibration_calls`` sets, every set distinct (fresh seeds; derived groups of the calibration share one draw,
    as a round's do), so no calibration call repeats an input either arm has seen."""
    base = seeds.seed("calibration", 0)

    def stream(purpose: str, count: int) -> dict[str, Any]:
        r: dict[str, Any] = {"seed": seeds.seed(purpose, 0), "count": max(1, count)}
        if plan.derive_spread:
            r.update(derive=plan.derive_spread, base=base)
        return r

    msg: dict[str, Any] = {
        "cmd": "calibrate", "warmup": stream("warmup", plan.warmup_calls),
        "singles": stream("calibration-singles", SINGLE_SAMPLES),
        "steady": [{**stream(f"calibration-steady-{i}", plan.calibration_calls)} for i in range(STEADY_SAMPLES)]}
    if memory.calibration_sets is not None:
        msg["alive"] = memory.calibration_sets
    return msg


def _calibrate(drv: ScheduleDriver, seeds: SeedSource, plan: TimingPlan, graph_below_s: float,
               probes: dict[str, dict], first: str = "A") -> tuple[int, dict, dict]:
    """The sample's shape from evidence the candidate cannot shape (docs/architecture.md, "The sample's shape"):
    ``k`` from the baseline's calibration alone, run while the candidate's sandbox has no request (and so must be
    asleep: the idle watch books anything it does meanwhile), every call on a fresh input set; graphs or eager from
    the baseline's calls (the candidate can only force eager, by failing capture); the memory bound from the
    baseline's set size and the free memory the baseline's sandbox sees. The candidate calibrates alone too, before
    or after the baseline (``first``: alternated over an item's pairs of processes, so neither arm's process is
    always the one that calibrated last): its first calls happen outside any timed sample, and its per-call time is
    recorded, never used."""
    memory = drv.memory
    if probes:  # an arm's capture probe ran in another sandbox: none in this one
        drv.both({arm: {"cmd": "configure", "timing": {"capture_probes": False}} for arm in probes}, "configure")
    msg = calibration_message(seeds, plan, memory)
    cal = {arm: drv.both({arm: dict(msg)}, f"warm-up ({ARM_ROLES[arm]})")[arm]
           for arm in ((first, "B" if first == "A" else "A"))}
    per_call = float(cal["A"]["per_call_s"])
    infos = {arm: c.get("timing_info") or {} for arm, c in cal.items()}
    hold = decide_head_start(infos)  # the timing sandboxes' own holds, not a capture probe's
    infos.update(probes)
    mode = {**decide_timing_mode(infos, graph_below_s), **hold}
    # k's memory bound: the item's plan where it has one (every process of the item counted, before anything
    # ran), and what the baseline's sandbox found free now (other processes of the machine, the candidate's too)
    caps = [c for c in (memory_cap({"A": cal["A"]}, graphs=bool(mode.get("graphs")), groups=memory.groups_held),
                        host_memory_cap(cal["A"], plan.sandbox_memory_bytes, memory.groups_held),
                        memory.sets_cap) if c is not None]
    cap = min(caps) if caps else None
    k = choose_calls_per_sample(per_call, plan, cap)
    conf = drv.both({arm: {"cmd": "configure", "k": k, "timing": mode} for arm in drv.boxes}, "configure")
    calibration: dict[str, Any] = {
        arm: {"per_call_s": c["per_call_s"], "steady_per_call_s": c.get("steady_per_call_s"),
              "single_call_s": c.get("single_call_s"), "memory": c.get("memory")}
        for arm, c in cal.items()}
    calibration["k_from"] = {"arm": "A", "per_call_s": per_call}
    calibration["k_memory_cap"] = cap
    calibration["sample"] = sample_length(k, per_call, plan, cap)
    infos = {arm: c.get("timing_info") or {} for arm, c in conf.items()}
    return k, calibration, {"decision": mode, "sandboxes": infos}


def round_groups(s1: int, s2: int, k: int, plan: TimingPlan) -> dict[str, dict]:
    """A round's two input groups: k sets each, drawn, or derived from one draw the two groups share
    (problems/derived.py; ``plan.derive_spread``)."""
    groups: dict[str, dict[str, Any]] = {"p1": {"seed": s1, "count": k}, "p2": {"seed": s2, "count": k}}
    if plan.derive_spread:
        for g in groups.values():
            g.update(derive=plan.derive_spread, base=s1)
    return groups


def _warm_round(drv: ScheduleDriver, seeds: SeedSource, k: int, plan: TimingPlan) -> float:
    """An untimed round of k-call samples of both arms; the baseline's fastest sample's seconds (the candidate's
    never shape the sample: :func:`_calibrate`)."""
    groups = round_groups(seeds.seed("warm-round", 0), seeds.seed("warm-round", 1), k, plan)
    phase = "timing (warm-up round)"
    times = []
    for held in _held_groups(drv.memory):
        drv.both({arm: {"cmd": "release", "fingerprint": None} for arm in drv.boxes}, phase, spread=True)
        drv.both({arm: {"cmd": "prepare", **{g: groups[g] for g in held}} for arm in drv.boxes}, phase, spread=True)
        samples = [drv.sample(arm, group, 0, phase)
                   for arm, group in (("A", "p1"), ("B", "p1"), ("B", "p2"), ("A", "p2")) if group in held]
        times += [s.seconds for s in samples if s.arm == "A"]
    return min(times)


def choose_prints(kept: list[str], k: int, per_group: int) -> tuple[list[int], list[int]]:
    """Which of a sandbox's kept outputs to fingerprint, drawn by the controller after the samples that made them:
    ``per_group`` calls of each group in ``kept`` (the groups whose k outputs the sandbox holds, in order). Returns
    their indices in the sandbox's kept list and in the round's numbering (p1's calls 0..k-1, then p2's)."""
    rng = secrets.SystemRandom()
    in_kept, in_round = [], []
    for at, group in enumerate(kept):
        for i in sorted(rng.sample(range(k), min(per_group, k))):
            in_kept.append(at * k + i)
            in_round.append((0 if group == "p1" else k) + i)
    return in_kept, in_round


def _add(a: Optional[float], b: Optional[float]) -> Optional[float]:
    return None if a is None or b is None else a + b


def _held_groups(memory: MemoryPlan) -> tuple[tuple[str, ...], ...]:
    """The input groups built together: both at once, or one after the other (half-rounds)."""
    return (("p1",), ("p2",)) if memory.groups_held == 1 else (("p1", "p2"),)


def run_paired_timing(candidate: Sandbox, baseline: Sandbox, proto: Protocol, plan: TimingPlan, seeds: SeedSource,
                      *, stats_seed: int, graph_below_s: float = 0.0, budget_scale: float = 1.0,
                      sample_cpus: Optional[list[int]] = None, probes: Optional[dict[str, dict]] = None,
                      memory: MemoryPlan = UNBUDGETED, k_override: Optional[KOverride] = None,
                      calibrate_first: str = "A") -> TimingEvidence:
    """``sample_cpus``: the CPU(s) both sandboxes share for samples ([timing].pin); while they release a round and
    build the next one's inputs they may use every CPU but those (``ScheduleDriver.between_rounds_cpus``).
    ``probes``: arm -> that arm's graph-capture probe, made in a sandbox that is not timed (then its timing sandbox
    makes none). Both arms' probes made elsewhere leave both timing sandboxes with the same history: with only the
    candidate's, the baseline's timing sandbox alone had test-captured graphs, and the 4 us A/A yardstick read
    0.998-0.999 in four of four pairs of processes on the H200, and with both probes outside 0.998-1.000, every CI
    containing 1.0 (docs/design/protocol.md#the-cuda-sample).
    ``memory``: the item's memory plan (measure/memory.py): the bound on ``k``, the calibration's sets and whether a
    round is built whole or in two halves. ``k_override``: calls per sample fixed by the user (``--autotune-k``),
    never re-planned. ``calibrate_first``: which arm calibrates first (the arms calibrate one at a time)."""
    t_start = time.perf_counter()
    with ScheduleDriver({"A": baseline, "B": candidate}, sample_cpus, memory) as drv:
        return _run(drv, t_start, proto, plan, seeds, stats_seed, graph_below_s, budget_scale, dict(probes or {}),
                    k_override, calibrate_first)


def _configure(drv: ScheduleDriver, k: int, mode: dict) -> dict:
    """Both sandboxes take ``k`` and the timing mode; returns ``mode`` with their timing reports."""
    conf = drv.both({arm: {"cmd": "configure", "k": k, "timing": mode["decision"]} for arm in drv.boxes},
                    "configure")
    return {**mode, "sandboxes": {arm: c.get("timing_info") or {} for arm, c in conf.items()}}


def _recheck(ev: TimingEvidence, since: int, k: int, plan: TimingPlan, cap: Optional[int]) -> Optional[float]:
    """The baseline's median per-call time over the timed rounds from ``since`` on, where it would choose a ``k``
    that disagrees with ``k`` by more than ``[timing].k_recheck_ratio`` (None: it agrees, or too few rounds)."""
    rounds = ev.rounds[since:]
    if len(rounds) < RECHECK_ROUNDS or (len(rounds) - RECHECK_ROUNDS) % RECHECK_ROUNDS:
        return None
    per_call = statistics.median(s.seconds / r.k for r in rounds for s in r.baseline)
    return per_call if k_disagrees(k, per_call, plan, cap) else None


def _last_outputs(drv: ScheduleDriver, ev: TimingEvidence, rec: Optional[RoundRecord], plan: TimingPlan) -> None:
    """The candidate's fingerprints of the last round's outputs (``rec``), at positions drawn now, and both
    sandboxes' outputs freed; a tamper snapshot of the candidate's sandbox with them."""
    last_fp: dict[str, Any] = {"cmd": "fingerprint", "positions_seed": secrets.randbits(63), "tamper": True}
    last_calls: Optional[list[int]] = None
    if plan.prints_per_group and rec is not None:
        last_fp["calls"], last_calls = choose_prints(["p2"] if drv.memory.groups_held == 1 else ["p1", "p2"], rec.k,
                                                     plan.prints_per_group)
    last = drv.both({"A": {"cmd": "release", "fingerprint": None}, "B": last_fp},
                    "timing (last outputs)", spread=True)
    if rec is not None:
        rec.prints = rec.mid_prints + (last["B"].get("prints") or [])
        if last_calls is not None:
            rec.print_calls = rec.mid_calls + last_calls
    ev.tamper += last["B"].get("tamper", [])


def _run(drv: ScheduleDriver, t_start: float, proto: Protocol, plan: TimingPlan, seeds: SeedSource,
         stats_seed: int, graph_below_s: float, budget_scale: float, probes: dict[str, dict],
         k_override: Optional[KOverride], calibrate_first: str) -> TimingEvidence:
    memory = drv.memory

    k, calibration, mode = _calibrate(drv, seeds, plan, graph_below_s, probes, calibrate_first)
    calibration["memory"] = {"groups_held": memory.groups_held, "sets_cap": memory.sets_cap} \
        if memory.budgeted else None
    cap = calibration.get("k_memory_cap")
    if k_override is not None:
        k_protocol, k = k, k_override.apply(k, plan, cap)
        calibration["k_override"] = {"asked": k_override.text, "k_protocol": k_protocol, "k": k}
        if k != k_protocol:
            mode = _configure(drv, k, mode)
    # one untimed round first: each sandbox meets its inputs, its k-call graph is captured (on CUDA), and nothing
    # done once per process lands in a sample that counts
    warm_per_call = _warm_round(drv, seeds, k, plan) / k
    if k_override is None and k * warm_per_call < plan.sample_target_s / 2 \
            and choose_calls_per_sample(warm_per_call, plan, cap) > k:
        # calibration ran cold or under load and over-estimated a call: samples this short would leave the harness's
        # own per-sample work (and the wall-clock rule's noise) as large as the calls. k again from the warm round.
        calibration["rederived_from_warm_round"] = {"k_calibrated": k, "per_call_s": warm_per_call}
        k = choose_calls_per_sample(warm_per_call, plan, cap)
        calibration["sample"] = sample_length(k, warm_per_call, plan, cap)
        mode = _configure(drv, k, mode)
        _warm_round(drv, seeds, k, plan)
    ev = TimingEvidence(calls_per_sample=k, calibration=calibration, mode=mode)
    planned_at = 0  # the first round timed at the k in use
    budget = plan.item_budget_s * budget_scale
    n_seed = 0
    prints_of: Optional[RoundRecord] = None
    while True:
        r_index = len(ev.rounds)
        groups = round_groups(seeds.seed("timing", n_seed), seeds.seed("timing", n_seed + 1), k, plan)
        n_seed += 2
        order = "BAAB" if (plan.order == "ABBA/BAAB" and r_index % 2 == 1) else "ABBA"
        seq = [(order[0], "p1"), (order[1], "p1"), (order[2], "p2"), (order[3], "p2")]
        samples: list[SampleRecord] = []
        books: dict[str, dict] = {"prepare": {}, "prepare_other": {}, "release": {}}
        t_prep = time.perf_counter()
        mid_prints: list = []
        mid_calls: list[int] = []
        for h, held in enumerate(_held_groups(memory)):
            # the last outputs are fingerprinted and freed first (the candidate's finalizers may run there), then
            # the inputs are built: only that step is the same work in both sandboxes, and compared.
            # Both sandboxes read their outputs, though only the candidate's prints are checked: the same work
            # between rounds in both arms leaves the same cache and allocator state to the next round's calls (the
            # two asymmetries found behind a CPU A/A of 1.039; between_rounds_cpus has the other)
            fp: Optional[dict[str, Any]] = ({"positions_seed": secrets.randbits(63)}
                                            if (prints_of is not None or h > 0) else None)
            calls: Optional[list[int]] = None
            if fp is not None and plan.prints_per_group:
                kept = ["p1"] if h > 0 else (["p2"] if memory.groups_held == 1 else ["p1", "p2"])
                fp["calls"], calls = choose_prints(kept, k if h > 0 or prints_of is None else prints_of.k,
                                                   plan.prints_per_group)
            t0 = time.perf_counter()
            rel = drv.both({arm: {"cmd": "release", "fingerprint": fp,
                                  "tamper": arm == "B" and h == 0 and r_index % TAMPER_EVERY == 0}
                            for arm in drv.boxes}, "timing (release)", spread=True)
            t_rel = time.perf_counter()
            ev.add_overhead("release", t_rel - t0, rel)
            prep = drv.both({arm: {"cmd": "prepare", **{g: groups[g] for g in held}} for arm in drv.boxes},
                            "timing (prepare)", spread=True)
            ev.add_overhead("prepare", time.perf_counter() - t_rel, prep)
            if h == 0 and prints_of is not None:
                prints_of.prints = prints_of.mid_prints + (rel["B"].get("prints") or [])
                if calls is not None:
                    prints_of.print_calls = prints_of.mid_calls + calls
            elif h > 0:
                mid_prints = rel["B"].get("prints") or []
                mid_calls = calls or []
            ev.tamper += rel["B"].get("tamper", [])
            for arm in drv.boxes:  # a round's books add up its halves
                for book, v in (("prepare", prep[arm]["_cpu_s"]), ("prepare_other", prep[arm]["_other_cpu_s"]),
                                ("release", rel[arm]["_cpu_s"])):
                    books[book][arm] = _add(books[book][arm] if h else 0.0, v)
            samples += [drv.sample(arm, group, pos, "timing") for pos, (arm, group) in enumerate(seq)
                        if group in held]
        rec = RoundRecord(r_index, order, groups["p1"], groups["p2"], tuple(samples),
                          prepare_cpu_s=books["prepare"], prepare_other_cpu_s=books["prepare_other"],
                          release_cpu_s=books["release"],
                          prepare_s=time.perf_counter() - t_prep - sum(
                              (s.window_ns[1] - s.window_ns[0]) * 1e-9 for s in samples),
                          helper_processes=drv.helpers.after_round(), mid_prints=mid_prints, mid_calls=mid_calls)
        ev.rounds.append(rec)
        ev.timed_s += sum(s.seconds for s in samples)
        prints_of = rec
        drift = None if k_override is not None else _recheck(ev, planned_at, k, plan, cap)
        if drift is not None:
            replans = calibration.setdefault("replanned", [])
            if replans:
                raise TimingRefused(
                    f"the baseline's call took {drift * 1e6:.1f} us in timed rounds {planned_at}-{len(ev.rounds) - 1} "
                    f"at k = {k}, which would choose k = {choose_calls_per_sample(drift, plan, cap)}, after k was "
                    f"already re-planned once ({replans[0]['k_from']} -> {k}): the machine's speed changed under the "
                    "item (another process, frequency, memory pressure); run it again on a quiet machine, or raise "
                    "[timing].k_recheck_ratio in a new protocol version", "timing", verdict="error")
            k_new = choose_calls_per_sample(drift, plan, cap)
            replans.append({"after_round": len(ev.rounds) - 1, "k_from": k, "k_to": k_new,
                            "baseline_per_call_s": drift})
            _last_outputs(drv, ev, prints_of, plan)  # the round's outputs are checked before the warm round's
            prints_of = None
            k = ev.calls_per_sample = k_new
            mode = _configure(drv, k, mode)
            _warm_round(drv, seeds, k, plan)
            planned_at = len(ev.rounds)
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
    _last_outputs(drv, ev, prints_of, plan)
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


#: why an item's next pair of processes did not start (pairs_stop_reason)
BUDGET_SPENT = "the item budget was spent before the next one started"
TARGET_REACHED = "its CI reached the target"


def pairs_stop_reason(runs: list[TimingEvidence], planned: int, ended: str = BUDGET_SPENT) -> str:
    """Why an item has the pairs of processes it has: ``ended`` says why the next one did not start, where fewer
    than ``planned`` ran."""
    return (f"{len(runs)} pairs of processes" + ("" if len(runs) == planned else f" of {planned} ({ended})")
            + f" ({'; '.join(ev.stop_reason for ev in runs)})")


def pool_process_pairs(runs: list[TimingEvidence], planned: int, proto: Protocol, device: str,
                       ended: str = BUDGET_SPENT) -> TimingEvidence:
    """The measurement of several pairs of processes, pooled by ``[statistics].pooling``, the CI resampling pairs
    of processes (measure/stats.py ``clustered_estimate``). ``planned``: how many were allowed; ``ended``: why the
    next one did not start, where fewer ran."""
    st = proto.statistics
    plan = proto.timing_plan(device)
    est = clustered_estimate([ev.pairs() for ev in runs], level=st.ci_level, resamples=st.bootstrap_resamples,
                             seed=len(runs), pooling=st.pooling_rule)
    est = with_process_offsets(est, plan.process_offset_sd, len(runs), st.ci_level)
    per_pair = [{"speedup": ev.estimate.speedup if ev.estimate else None,
                 "ci": [ev.estimate.ci_low, ev.estimate.ci_high] if ev.estimate else None,
                 "n_pairs": ev.estimate.n_pairs if ev.estimate else 0, "calls_per_sample": ev.calls_per_sample,
                 "stop_reason": ev.stop_reason} for ev in runs]
    last = runs[-1]
    return dataclasses.replace(
        last, rounds=[r for ev in runs for r in ev.rounds], estimate=est,
        ci_target_met=est.rel_width <= plan.ci_target_rel_width,
        stop_reason=pairs_stop_reason(runs, planned, ended),
        elapsed_s=sum(ev.elapsed_s for ev in runs), timed_s=sum(ev.timed_s for ev in runs),
        overhead=pooled_overhead(runs),
        calibration={**last.calibration, "process_pairs": per_pair})


def _estimate(ev: TimingEvidence, proto: Protocol, stats_seed: int) -> PairedEstimate:
    base, cand = ev.pairs()
    st = proto.statistics
    try:
        return paired_estimate(base, cand, level=st.ci_level, resamples=st.bootstrap_resamples, seed=stats_seed)
    except ValueError as e:
        raise TimingRefused(str(e)) from None


__all__ = ["run_paired_timing", "pool_process_pairs", "pairs_stop_reason", "pooled_overhead", "TimingEvidence", "RoundRecord", "SampleRecord", "TimingRefused",
           "ARM_ROLES", "choose_calls_per_sample", "decide_timing_mode", "memory_cap"]
