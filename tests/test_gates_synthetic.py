"""The integrity gates and the schedule's statistics on synthetic rounds: no sandbox, no timing, exact properties.

Each test builds the TimingEvidence a schedule would have produced -- honest, loaded by other work, or cheating in
one specific way -- and checks that the gate passes or refuses it, for the reason that names the defence.
"""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest
import torch

from conftest import REPO
from pytest_autotune.gates.base import GateContext
from pytest_autotune.gates.clocks import DeviceClockGate, WallClockGate
from pytest_autotune.gates.integrity import IdleGate, ThreadGate
from pytest_autotune.gates.timed_outputs import TimedOutputsGate
from pytest_autotune.measure.schedule import (
    RoundRecord,
    SampleRecord,
    TimingEvidence,
    choose_calls_per_sample,
    memory_cap,
)
from pytest_autotune.measure.stats import paired_estimate
from pytest_autotune.protocol import load_protocol

PROTO = load_protocol(REPO / "protocol.toml")
OVERHEAD = 300e-6  # harness work around a sample, the same for both arms


def _sample(arm: str, group: str, pos: int, t0: int, *, work: float, reported: float | None = None,
            preempt_in: float = 0.0, preempt_out: float = 0.0, extra_threads_cpu: float = 0.0,
            new_threads: int = 0, event: float | None = None, jitter: float = 0.0) -> tuple[SampleRecord, int]:
    """A sample whose calls run ``work`` s of CPU, preempted ``preempt_in`` s inside its timed region and
    ``preempt_out`` s around it; the sandbox reports ``reported`` (default: the truth, work + preempt_in). The
    harness's own work around it is ``OVERHEAD`` + ``jitter``."""
    host = work + preempt_in
    rep = host if reported is None else reported
    window = OVERHEAD + preempt_out + host
    start = t0 + int((OVERHEAD / 2 + preempt_out) * 1e9)
    stamps = (start, start + int(host * 1e9))
    t1 = t0 + int(window * 1e9)
    main_cpu = OVERHEAD + jitter + work
    return SampleRecord(arm, group, pos, rep if event is None else event, rep, (t0, t1), stamps,
                        main_cpu + extra_threads_cpu, main_cpu, preempt_in + preempt_out, new_threads), t1 + 50_000


def _evidence(n_rounds: int, make) -> TimingEvidence:
    """``make(r, pos, arm, group) -> kwargs for _sample``."""
    ev = TimingEvidence(calls_per_sample=1)
    t = 10**9
    for r in range(n_rounds):
        order = "ABBA" if r % 2 == 0 else "BAAB"
        seq = [(order[0], "p1"), (order[1], "p1"), (order[2], "p2"), (order[3], "p2")]
        samples = []
        for pos, (arm, group) in enumerate(seq):
            s, t = _sample(arm, group, pos, t, **make(r, pos, arm, group))
            samples.append(s)
        ev.rounds.append(RoundRecord(r, order, {"seed": 2 * r, "count": 1}, {"seed": 2 * r + 1, "count": 1},
                                     tuple(samples), prepare_cpu_s={"A": 0.010, "B": 0.010}))
    return ev


def _ctx(ev: TimingEvidence, device: str = "cpu") -> GateContext:
    ctx = GateContext(nodeid="x", protocol=PROTO, problem=SimpleNamespace(name="p"),  # type: ignore[arg-type]
                      candidate=None, device=SimpleNamespace(name=device),  # type: ignore[arg-type]
                      seeds=None, sizes={}, measuring=True)  # type: ignore[arg-type]
    ctx.timing = ev
    return ctx


# ------------------------------------------------------------------------------------------------ wall clock


def test_wall_clock_passes_honest_rounds_on_a_quiet_machine():
    ev = _evidence(20, lambda r, pos, arm, g: {"work": 0.002 if arm == "A" else 0.001})
    assert WallClockGate().check(_ctx(ev), "integrity") is None


def test_wall_clock_is_not_fooled_by_preemption_of_long_baseline_samples():
    """A 100x faster candidate: the baseline's long samples are preempted often and long, the candidate's rarely.
    Preemption inside a sample adds to its report, not to its thread's CPU, so nothing looks hidden."""
    rng = random.Random(1)

    def make(r, pos, arm, g):
        if arm == "A":
            return {"work": 0.1, "preempt_in": rng.choice([0.0, 0.02, 0.05]), "preempt_out": rng.choice([0, 0.003])}
        return {"work": 0.001, "preempt_out": rng.choice([0.0, 0.0, 0.004])}

    ev = _evidence(16, make)
    assert WallClockGate().check(_ctx(ev), "integrity") is None


@pytest.mark.parametrize("share", [0.5, 0.75, 1.0])
def test_wall_clock_refuses_a_clock_that_halves_most_candidate_samples(share):
    n = 20
    halved = set(random.Random(2).sample(range(2 * n), int(share * 2 * n)))

    def make(r, pos, arm, g):
        if arm == "B" and (2 * r + (g == "p2")) in halved:
            return {"work": 0.002, "reported": 0.001}
        return {"work": 0.002}

    refused = WallClockGate().check(_ctx(_evidence(n, make)), "integrity")
    assert refused is not None and "time is missing" in refused.reason


def test_wall_clock_sees_a_halved_sample_through_milliseconds_of_preemption():
    """The catalog's cheat_clock_between_checks on a loaded machine (measured in CI: windows and run-queue time
    swinging by several ms around 2 ms samples): the controller's window and the run-queue time both drown a
    1 ms cut; the main thread's CPU only ever loses time to preemption, and the samples the kernel saw run
    unpreempted keep the cut whole. The same load on an honest candidate is not refused."""
    rng = random.Random(3)

    def load():
        preempted = rng.random() < 0.5
        return {"preempt_in": rng.choice([0.0, 0.003, 0.008]) if preempted else 0.0,
                "preempt_out": rng.choice([0.0005, 0.005, 0.012]) if preempted else 0.0}

    def cheat(r, pos, arm, g):
        kw = {"work": 0.002, **load()}
        if arm == "B" and g == "p2":  # its second sample of every round, at half its length
            kw["reported"] = (kw["work"] + kw["preempt_in"]) / 2
        return kw

    refused = WallClockGate().check(_ctx(_evidence(16, cheat)), "integrity")
    assert refused is not None and "time is missing" in refused.reason
    for seed in range(20):
        rng.seed(100 + seed)
        honest = _evidence(16, lambda r, pos, arm, g: {"work": 0.004 if arm == "A" else 0.002, **load()})
        assert WallClockGate().check(_ctx(honest), "integrity") is None, seed


def test_wall_clock_allowance_is_not_widened_by_the_cheats_own_two_modes():
    """cheat_clock_between_checks as the catalog session measured it (2026-12-01): 16 unpreempted samples an arm,
    the harness's own work around a sample spread over ~0.6-1.1 ms, every other candidate sample of ~2 ms reported
    at half (half of 1.2-2.4 ms hidden). Bootstrapping the candidate's samples made its two modes part of the
    "noise" and accepted it in 2 of 6 sessions; the spread is read from the baseline's samples. Honest candidates
    under the same jitter pass."""
    def session(seed: int, cheat: bool) -> TimingEvidence:
        rng = random.Random(seed)

        def make(r, pos, arm, g):
            kw = {"work": rng.uniform(0.0012, 0.0024) if arm == "B" else 0.004,
                  "jitter": rng.gauss(0.0, 100e-6) + rng.expovariate(1 / 80e-6)}
            if cheat and arm == "B" and g == "p2":
                kw["reported"] = kw["work"] / 2
            return kw

        return _evidence(8, make)

    # 200 seeded sessions each: the cheat refused in 198 (171 with both arms bootstrapped), honest ones in none
    refused = [WallClockGate().check(_ctx(session(seed, cheat=True)), "integrity") for seed in range(200)]
    assert all("time is missing" in r.reason for r in refused if r is not None)
    assert sum(r is not None for r in refused) >= 195
    for seed in range(200):
        assert WallClockGate().check(_ctx(session(1000 + seed, cheat=False)), "integrity") is None, seed


def test_wall_clock_is_not_fooled_by_one_outlying_baseline_sample():
    """The fresh-clone CI failure of 2026-12-02: 8 unpreempted baseline samples, one of them with milliseconds of the
    harness's own work around it, widened a standard-deviation allowance to 0.99 ms and the clock cheat (1.05 ms
    hidden) was accepted at 3.2x. The rule takes at least 12 samples an arm and a spread one sample does not set."""
    def session(seed: int, cheat: bool) -> TimingEvidence:
        rng = random.Random(seed)
        outlier = rng.randrange(16)

        def make(r, pos, arm, g):
            kw = {"work": rng.uniform(0.0012, 0.0024) if arm == "B" else 0.004,
                  "jitter": rng.gauss(0.0, 100e-6) + rng.expovariate(1 / 80e-6)}
            if arm == "A" and 2 * r + (g == "p2") == outlier:
                kw["jitter"] += 0.003
            if cheat and arm == "B" and g == "p2":
                kw["reported"] = kw["work"] / 2
            return kw

        return _evidence(8, make)

    refused = [WallClockGate().check(_ctx(session(seed, cheat=True)), "integrity") for seed in range(200)]
    assert sum(r is not None and "time is missing" in r.reason for r in refused) >= 195
    for seed in range(200):
        assert WallClockGate().check(_ctx(session(1000 + seed, cheat=False)), "integrity") is None, seed


def test_wall_clock_never_refuses_honest_work_because_the_machine_is_loaded():
    """Measured on this 2-core VM with three busy loops beside two sessions: almost every 4 ms baseline sample was
    preempted (0-7 of 32 ran unpreempted), which lowers its unreported CPU, while the 1 ms candidate samples mostly
    were not. The rule it replaced compared all samples then and refused honest_fused in both sessions (3.9 ms
    "hidden"). The candidate's lower bound against the baseline's upper bound cannot refuse honest work however the
    preemption falls, and the item says the check was weaker."""
    for seed in range(100):
        rng = random.Random(seed)

        def make(r, pos, arm, g):
            long = arm == "A"
            preempted = rng.random() < (0.95 if long else 0.4)
            return {"work": 0.004 if long else 0.001, "jitter": rng.gauss(0.0, 100e-6),
                    "preempt_in": rng.uniform(0.0005, 0.008) if preempted and rng.random() < 0.7 else 0.0,
                    "preempt_out": rng.uniform(0.0005, 0.008) if preempted else 0.0}

        ctx = _ctx(_evidence(16, make))
        assert WallClockGate().check(ctx, "integrity") is None, seed
        assert "machine was loaded" in " ".join(ctx.warnings), seed
        # the rule runs on each pair of processes of an item: the item says it once
        assert WallClockGate().check(ctx, "integrity") is None, seed
        assert sum("machine was loaded" in w for w in ctx.warnings) == 1, seed


def test_wall_clock_refuses_stamps_outside_the_controllers_window():
    ev = _evidence(8, lambda r, pos, arm, g: {"work": 0.001})
    for rd in ev.rounds:
        rd.samples = tuple(s._replace(stamps_ns=(s.window_ns[0] - 10**6, s.window_ns[0])) if s.arm == "B" else s
                           for s in rd.samples)
    refused = WallClockGate().check(_ctx(ev), "integrity")
    assert refused is not None and "outside the interval" in refused.reason


def test_wall_clock_on_a_gpu_compares_the_controllers_windows():
    ev = _evidence(10, lambda r, pos, arm, g: {"work": 0.001, "reported": 0.0005 if arm == "B" else None})
    refused = WallClockGate().check(_ctx(ev, "cuda"), "integrity")
    assert refused is not None and "controller's own window" in refused.reason
    ev = _evidence(10, lambda r, pos, arm, g: {"work": 0.001})
    assert WallClockGate().check(_ctx(ev, "cuda"), "integrity") is None


# ------------------------------------------------------------------------------------------------ threads


def test_threads_refuses_cpu_of_other_threads_during_candidate_samples():
    ev = _evidence(8, lambda r, pos, arm, g: {"work": 0.002, "extra_threads_cpu": 0.001 if arm == "B" else 0.0})
    refused = ThreadGate().check(_ctx(ev), "integrity")
    assert refused is not None and "threads other than the calling one" in refused.reason
    ev = _evidence(8, lambda r, pos, arm, g: {"work": 0.002, "extra_threads_cpu": 0.001 if arm == "A" else 0.0})
    assert ThreadGate().check(_ctx(ev), "integrity") is None  # only the candidate's samples are its own


def test_threads_refuses_helper_processes_and_threads_left_running():
    ev = _evidence(4, lambda r, pos, arm, g: {"work": 0.001})
    ev.rounds[2].helper_processes = 3
    assert "helper process" in ThreadGate().check(_ctx(ev), "integrity").reason
    ev = _evidence(4, lambda r, pos, arm, g: {"work": 0.001, "new_threads": 1 if arm == "B" and r == 1 else 0})
    assert "left running" in ThreadGate().check(_ctx(ev), "integrity").reason


# ------------------------------------------------------------------------------------------------ idle


def _idle_ev(idle_b: float, prep_b: float = 0.010, other_b: float = 0.0, largest_b: float = 0.0) -> TimingEvidence:
    """``prep_b``: the candidate sandbox's CPU building a round's inputs (the baseline's: 10 ms), of which
    ``other_b`` on threads other than the main one; ``largest_b``: the most idle CPU of one interval."""
    ev = _evidence(8, lambda r, pos, arm, g: {"work": 0.002})
    for rd in ev.rounds:
        rd.prepare_cpu_s = {"A": 0.010, "B": prep_b}
        rd.prepare_other_cpu_s = {"A": 0.0, "B": other_b}
    ev.cpu = {"A": {"busy_s": 0.2, "idle_s": 0.0005, "during_other_samples_s": 0.0, "readable": True},
              "B": {"busy_s": 0.2, "idle_s": idle_b, "during_other_samples_s": idle_b / 2, "readable": True,
                    "idle_max_s": largest_b}}
    ev.commands = {"A": 40, "B": 40}
    return ev


def test_idle_passes_a_sandbox_that_sleeps_between_requests():
    assert IdleGate().check(_ctx(_idle_ev(0.0008)), "integrity") is None


def test_idle_refuses_cpu_used_while_no_request_was_outstanding():
    refused = IdleGate().check(_ctx(_idle_ev(0.02)), "integrity")
    assert refused is not None and "no request to answer" in refused.reason
    # the refusal names where the CPU went, when the watch recorded it
    ev = _idle_ev(0.02)
    ev.cpu["B"]["idle_top"] = [{"s": 0.009, "main_thread_s": 0.0001, "after": "timing (release)"}]
    refused = IdleGate().check(_ctx(ev), "integrity")
    assert refused is not None and "9.00 ms after timing (release) (main thread 0.10 ms; 0.00 ms of it after the " \
        "answer" in refused.reason
    ev.cpu["B"]["idle_top"] = [{"s": 0.009, "main_thread_s": 0.006, "after_answer_s": 0.005, "after": "timing sample"}]
    refused = IdleGate().check(_ctx(ev), "integrity")
    assert refused is not None and "(main thread 6.00 ms; 5.00 ms of it after the answer" in refused.reason


def test_idle_leaves_out_one_interval_but_not_work_that_recurs():
    """CI, 2026-12-01: an honest clamp's sandbox used 3.99 ms idle in one item (0.00-0.28 ms in 12 re-runs): a
    one-off event in one interval is left out. The same CPU spread over the item's intervals is refused."""
    assert IdleGate().check(_ctx(_idle_ev(0.0045, largest_b=0.0040)), "integrity") is None
    refused = IdleGate().check(_ctx(_idle_ev(0.0045, largest_b=0.0006)), "integrity")
    assert refused is not None and "without its largest interval" in refused.reason


def test_idle_refuses_work_done_while_inputs_were_built():
    """A helper thread working while the inputs are built: refused however little the whole CPU moved. The main
    thread's own prepare CPU may differ by what memory the arm's kernel left untouched (1.49x measured for an
    honest clamp against its reference): only a gross excess of the whole is refused."""
    refused = IdleGate().check(_ctx(_idle_ev(0.0008, prep_b=0.015, other_b=0.004)), "integrity")
    assert refused is not None and "other than the main one" in refused.reason
    assert IdleGate().check(_ctx(_idle_ev(0.0008, prep_b=0.0149)), "integrity") is None  # honest: page faults
    refused = IdleGate().check(_ctx(_idle_ev(0.0008, prep_b=0.040)), "integrity")
    assert refused is not None and "building a round's inputs" in refused.reason


# ------------------------------------------------------------------------------------------------ device clock


def test_device_clock_refuses_work_hidden_from_the_events():
    ev = _evidence(8, lambda r, pos, arm, g: {"work": 0.002, "event": 0.0001 if arm == "B" else 0.002})
    refused = DeviceClockGate().check(_ctx(ev, "cuda"), "integrity")
    assert refused is not None and "outside the timed stream" in refused.reason


def test_device_clock_tolerates_graph_staging_noise_on_microsecond_calls():
    """Graph mode: host time ~6x the event time in both arms (staging inputs); the arms differ by ~9% of that."""
    ev = _evidence(8, lambda r, pos, arm, g: {"work": 0.006 if arm == "A" else 0.0065, "event": 0.001})
    assert DeviceClockGate().check(_ctx(ev, "cuda"), "integrity") is None


# ------------------------------------------------------------------------------------------------ timed outputs


def _prints(value: float) -> list:
    """A candidate call's fingerprint as the sandbox reports it, of an 8-element output filled with ``value``."""
    t = torch.full((8,), value, dtype=torch.float64)
    idx = torch.arange(4)
    return [{"numel": 8, "shape": [8], "dtype": "float32", "sum": float(t.sum()), "abs_sum": float(t.sum()),
             "index": idx, "values": t[idx]}]


def test_timed_outputs_refuses_a_stale_timed_answer():
    ev = _evidence(2, lambda r, pos, arm, g: {"work": 0.001})
    golden = {s: torch.full((8,), float(s)) for s in range(4)}

    for rd in ev.rounds:
        rd.prints = [_prints(float(rd.recipes_p1["seed"])), _prints(float(rd.recipes_p2["seed"]))]
    ctx = _ctx(ev)
    ctx.golden = SimpleNamespace(  # type: ignore[assignment]
        iter_stream=lambda recipe, only=None: (g for g in [golden[recipe["seed"]]]))
    assert TimedOutputsGate().check(ctx, "integrity") is None
    ev.rounds[1].prints[1] = _prints(0.0)  # round 1's second call returned round 0's answer
    refused = TimedOutputsGate().check(ctx, "integrity")
    assert refused is not None and "timed round 1, candidate call 1" in refused.reason


def test_timed_outputs_checks_the_calls_the_controller_chose_after_the_round():
    """[devices.cpu].prints_per_group: a round's prints are of a few calls, named by ``print_calls`` (p1's 0..k-1,
    then p2's); the gate builds the golden outputs of just those sets and compares each with its own call's print."""
    ev = _evidence(3, lambda r, pos, arm, g: {"work": 0.001})
    k = 3
    asked: list = []

    def golden_of(recipe: dict, only=None):
        asked.append((recipe["seed"], only))
        return (torch.full((8,), float(recipe["seed"] * 10 + j)) for j in (only if only is not None else range(k)))

    for rd in ev.rounds:
        rd.recipes_p1, rd.recipes_p2 = {**rd.recipes_p1, "count": k}, {**rd.recipes_p2, "count": k}
        rd.print_calls = [1, k + 2]  # p1's second call, p2's third
        rd.prints = [_prints(rd.recipes_p1["seed"] * 10 + 1.0), _prints(rd.recipes_p2["seed"] * 10 + 2.0)]
    ctx = _ctx(ev)
    ctx.golden = SimpleNamespace(iter_stream=golden_of)  # type: ignore[assignment]
    assert TimedOutputsGate().check(ctx, "integrity") is None
    assert all(only in ([1], [2]) for _, only in asked)
    ev.rounds[2].prints[1] = _prints(ev.rounds[2].recipes_p2["seed"] * 10 + 1.0)  # p2's call 2 returned call 1's answer
    refused = TimedOutputsGate().check(ctx, "integrity")
    assert refused is not None and f"timed round 2, candidate call {k + 2}" in refused.reason
    ev.rounds[0].prints = ev.rounds[0].prints[:1]  # fewer prints than chosen calls
    refused = TimedOutputsGate().check(ctx, "integrity")
    assert refused is not None and "1 timed outputs reported for 2 calls" in refused.reason


# ------------------------------------------------------------------------------------------------ statistics


def test_paired_median_ci_covers_one_for_an_aa_in_most_sessions():
    """A/A pairs with 3% noise: over 200 seeded sessions of 64 pairs, the 95% CI covers 1.0 about 95% of the
    time (fixed seeds: the test is deterministic)."""
    covered = 0
    for session in range(200):
        rng = random.Random(session)
        base = [1e-3 * rng.lognormvariate(0, 0.03) for _ in range(64)]
        cand = [1e-3 * rng.lognormvariate(0, 0.03) for _ in range(64)]
        est = paired_estimate(base, cand, level=0.95, resamples=1000, seed=session)
        covered += est.ci_low <= 1.0 <= est.ci_high
    assert 0.88 <= covered / 200 <= 0.99, covered


def test_calls_per_sample_are_capped_by_free_device_memory():
    """protocol 4 asks for 3 ms samples on CUDA: 4 us calls of 16 MiB sets would take ~500 of them, which ran a
    sandbox out of GPU memory on the H200. k never exceeds what 70% of the smaller free memory holds for both
    sandboxes' two groups of inputs and outputs (4 sets per call), and their graphs' static copies too in graph
    mode (8); without a device budget nothing is capped."""
    plan = PROTO.timing_plan("cuda")
    set_bytes, gib = 16 << 20, 1 << 30
    replies = {"A": {"memory": {"set_bytes": set_bytes, "free_bytes": 100 * gib}},
               "B": {"memory": {"set_bytes": set_bytes, "free_bytes": 10 * gib}}}
    cap = memory_cap(replies)
    assert cap == int(0.7 * 10 * gib // (4 * set_bytes)) == 112
    assert memory_cap(replies, graphs=True) == int(0.7 * 10 * gib // (8 * set_bytes)) == 56
    assert choose_calls_per_sample(4e-6, plan, cap) == 112
    assert choose_calls_per_sample(4e-6, plan) == plan.max_calls_per_sample
    assert choose_calls_per_sample(1.0, plan, cap) == 1  # a long call still gets its one call
    assert memory_cap({"A": {"memory": {"set_bytes": set_bytes, "free_bytes": None}}, "B": {}}) is None
    tiny = {"A": {"memory": {"set_bytes": 1 << 40, "free_bytes": gib}}}
    assert memory_cap(tiny) == 1
    # the candidate's own report of its call's size does not choose k: the baseline's does
    liar = {"A": {"memory": {"set_bytes": set_bytes, "free_bytes": 10 * gib}},
            "B": {"memory": {"set_bytes": 1 << 40, "free_bytes": 10 * gib}}}
    assert memory_cap(liar) == 112


def test_a_wrong_answer_that_does_not_come_back_on_replay_is_still_refused():
    """Hypothesis replays a failing example before it reports it. A candidate whose answer changes between calls
    (uninitialised memory) passes the replay; the probe must refuse with the mismatch, not raise Hypothesis's
    flaky-test error past the gate."""
    from pytest_autotune.gates.probes import ProbeMismatch, explicit_recipes, run_probe

    sig = [{"tensor": True, "shape": [4, 8], "dtype": "float32", "floating": True}]
    probe_seed = 1234
    n_explicit = len(explicit_recipes(sig, probe_seed % (2**40)))
    calls = []

    def check_one(recipe: dict) -> None:
        calls.append(recipe)
        if len(calls) == n_explicit + 1:  # the first drawn example fails once, then never again
            raise ProbeMismatch("output: 32 of 32 elements outside tolerance", recipe)

    with pytest.raises(ProbeMismatch, match="outside tolerance") as raised:
        run_probe(check_one, sig, {}, 5, probe_seed, deadline_s=60.0)
    assert raised.value.recipe is calls[n_explicit]
    assert len(calls) > n_explicit + 1, "the failing example was never replayed: the test no longer exercises it"
