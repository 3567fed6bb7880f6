"""The sample's shape belongs to the protocol (docs/architecture.md, "The sample's shape"): ``k``, graphs or eager
and the memory bound come from the baseline's calibration alone, every calibration call on a fresh input set, and
the baseline's timed calls re-check ``k`` as the rounds go.

The schedule runs against two scripted sandboxes (tests/test_schedule_placement.py's, whose pids are real sleeping
processes) that answer each request with per-call times this file chooses: a candidate that reports a microsecond
call in calibration (an answer cache, an unchecked output) and a baseline whose timed calls drift.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

import pytest
from test_schedule_placement import ScriptedSandbox

from pytest_autotune.measure.memory import UNBUDGETED
from pytest_autotune.measure.sampling import (
    HOST_MEMORY_SHARE,
    KOverride,
    choose_calls_per_sample,
    decide_timing_mode,
    host_memory_cap,
    memory_cap,
)
from pytest_autotune.measure.schedule import calibration_message, run_paired_timing
from pytest_autotune.measure.timing_records import TimingRefused
from pytest_autotune.protocol import load_protocol
from pytest_autotune.seeds import SeedSource

PROTO = load_protocol(Path(__file__).resolve().parents[1] / "pytest_autotune" / "protocol.toml")
PLAN = PROTO.timing_plan("cpu")

pytestmark = pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs Linux CPU affinity")


class TimedSandbox(ScriptedSandbox):
    """A scripted sandbox whose calibration reports ``calibrated_s`` a call and whose samples take ``timed_s`` a
    call (a function of the sample's index, so a test can make the machine change speed)."""

    def __init__(self, role: str, asked: list, calibrated_s: float, timed_s, memory: Optional[dict] = None,
                 timing_info: Optional[dict] = None) -> None:
        super().__init__(role, asked)
        self.calibrated_s = calibrated_s
        self.timed_s = timed_s
        self.memory = memory
        self.timing_info = timing_info or {}
        self.k = 1
        self.samples = 0

    def _answer(self, msg: dict) -> dict:
        cmd = msg["cmd"]
        if cmd == "calibrate":
            return {"ok": True, "per_call_s": self.calibrated_s, "steady_per_call_s": [self.calibrated_s] * 3,
                    "memory": self.memory, "timing_info": self.timing_info}
        if cmd == "configure":
            self.k = int(msg.get("k", self.k))
            return {"ok": True, "timing_info": self.timing_info}
        if cmd == "sample":
            self.samples += 1
            s = self.k * self.timed_s(self.samples)
            return {"ok": True, "s": s, "host_s": s, "stamps_ns": [0, 1]}
        return super()._answer(msg)


def _boxes(base_cal: float, base_timed, cand_cal: float, cand_timed, **kw):
    asked: list = []
    return {"A": TimedSandbox("baseline", asked, base_cal, base_timed, **kw.get("A", {})),
            "B": TimedSandbox("candidate", asked, cand_cal, cand_timed, **kw.get("B", {}))}, asked


def _time(boxes: dict, plan=PLAN, budget_scale: float = 0.05, **kw):
    try:
        return run_paired_timing(boxes["B"], boxes["A"], PROTO, plan, SeedSource(b"s" * 16, "shape"), stats_seed=1,
                                 budget_scale=budget_scale, **kw)
    finally:
        for b in boxes.values():
            b.close()


def test_k_comes_from_the_baseline_whatever_the_candidate_reports():
    """A candidate whose calibrated call reads 3.4 us (an answer cache of repeated inputs: 02_relu under protocol 8,
    k = 64 and 8x against an honest 1.8x) gets the k of the baseline's 500 us call, as an honest one does."""
    want = choose_calls_per_sample(500e-6, PLAN)
    for cand_cal in (3.4e-6, 500e-6, 50e-3):
        boxes, _ = _boxes(500e-6, lambda i: 500e-6, cand_cal, lambda i: 300e-6)
        ev = _time(boxes)
        assert ev.calls_per_sample == want, cand_cal
        assert ev.calibration["k_from"] == {"arm": "A", "per_call_s": 500e-6}
        assert ev.calibration["B"]["per_call_s"] == cand_cal  # recorded, never used
        assert all(r.k == want for r in ev.rounds)


def test_k_has_the_protocols_floor_and_ceiling():
    assert PLAN.min_calls_per_sample == 8
    assert choose_calls_per_sample(1.0, PLAN) == PLAN.min_calls_per_sample  # a long call: still 8 calls a sample
    assert choose_calls_per_sample(1e-9, PLAN) == PLAN.max_calls_per_sample
    assert choose_calls_per_sample(1e-9, PLAN, cap=3) == 3  # memory wins over the floor
    cuda = PROTO.timing_plan("cuda")
    assert cuda.min_calls_per_sample == 1 and choose_calls_per_sample(1.0, cuda) == 1


def test_the_arms_calibrate_one_at_a_time():
    """While the baseline calibrates, the candidate's sandbox has no request: it must be asleep (its CPU meanwhile
    is idle CPU, booked against it), so it cannot slow the baseline's calibration on the shared CPU."""
    for first, order in (("A", ["baseline", "candidate"]), ("B", ["candidate", "baseline"])):
        boxes, asked = _boxes(500e-6, lambda i: 500e-6, 400e-6, lambda i: 400e-6)
        ev = _time(boxes, calibrate_first=first)
        cal = [role for role, cmd in asked if cmd == "calibrate"]
        assert cal == order  # alternated over an item's pairs of processes (flow.py)
        at = [i for i, (_, cmd) in enumerate(asked) if cmd == "calibrate"]
        assert at[1] == at[0] + 1  # nothing was sent to the other arm while one calibrated
        assert ev.calls_per_sample == choose_calls_per_sample(500e-6, PLAN)  # the baseline's, either way


def test_no_calibration_call_repeats_an_input():
    """Warm-up, single-call and steady groups: every set from a seed of its own, in both arms the same recipes."""
    msg = calibration_message(SeedSource(b"s" * 16, "shape"), PLAN, UNBUDGETED)
    recipes = [msg["warmup"], msg["singles"], *msg["steady"]]
    seeds = [r["seed"] for r in recipes]
    assert len(set(seeds)) == len(seeds) == 2 + len(msg["steady"])
    assert [r["count"] for r in msg["steady"]] == [PLAN.calibration_calls] * len(msg["steady"])
    # derived sets: the groups share one draw, as a round's do, and each set is derived from its own seed
    assert {r.get("derive") for r in recipes} == {PLAN.derive_spread}
    assert len({r.get("base") for r in recipes}) == 1


def test_a_baseline_that_slows_down_is_replanned_once():
    """The baseline's timed calls take 4x its calibration (another process, a slower clock): the k they would choose
    disagrees by more than [timing].k_recheck_ratio, so k is re-planned after a few rounds, and the rounds before
    and after each give their own ratios."""
    boxes, _ = _boxes(100e-6, lambda i: 400e-6, 100e-6, lambda i: 200e-6)
    ev = _time(boxes, budget_scale=0.1)
    k0 = choose_calls_per_sample(100e-6, PLAN)
    replans = ev.calibration["replanned"]
    assert len(replans) == 1 and replans[0]["k_from"] == k0
    assert replans[0]["k_to"] == choose_calls_per_sample(400e-6, PLAN) < k0
    assert {r.k for r in ev.rounds} == {k0, replans[0]["k_to"]}
    assert ev.estimate is not None and ev.estimate.speedup == pytest.approx(2.0)


def test_a_baseline_that_keeps_changing_speed_is_an_error_of_the_item():
    """After one re-plan, a second disagreement ends the item as an error (gate timing): the machine changed under
    it, which is nobody's speedup."""
    boxes, _ = _boxes(100e-6, lambda i: 400e-6 if i <= 12 else 10e-6, 100e-6, lambda i: 200e-6)
    with pytest.raises(TimingRefused) as e:
        _time(boxes, budget_scale=0.5)
    assert e.value.verdict == "error" and e.value.gate == "timing"
    assert "re-planned once" in str(e.value) and "k_recheck_ratio" in str(e.value)


def test_a_fixed_k_is_never_replanned():
    """--autotune-k: the user's k holds however the baseline's calls drift (harness benchmarks time at a given k)."""
    boxes, _ = _boxes(100e-6, lambda i: 400e-6, 100e-6, lambda i: 200e-6)
    ev = _time(boxes, k_override=KOverride.parse("x2"))
    k0 = choose_calls_per_sample(100e-6, PLAN)
    assert ev.calls_per_sample == 2 * k0 and {r.k for r in ev.rounds} == {2 * k0}
    assert "replanned" not in ev.calibration
    assert ev.calibration["k_override"] == {"asked": "x2", "k_protocol": k0, "k": 2 * k0}


def test_k_override_parses_a_count_or_a_multiple():
    assert KOverride.parse("1").apply(16, PLAN, None) == 1
    assert KOverride.parse("x4").apply(16, PLAN, None) == PLAN.max_calls_per_sample  # capped
    assert KOverride.parse("x0.5").apply(16, PLAN, None) == 8
    assert KOverride.parse("x4").apply(16, PLAN, cap=20) == 20
    for bad in ("0", "x0", "-3", "four", "x"):
        with pytest.raises(ValueError, match="--autotune-k"):
            KOverride.parse(bad)


def test_the_memory_bound_is_the_baselines():
    """The candidate's sandbox can hold device memory to shrink what is free, or report a huge call: k's memory
    bound comes from the baseline's reply alone (the baseline's sandbox sees what the candidate's holds)."""
    gib, set_bytes = 1 << 30, 16 << 20
    boxes, _ = _boxes(4e-6, lambda i: 4e-6, 4e-6, lambda i: 4e-6,
                      A={"memory": {"set_bytes": set_bytes, "free_bytes": 10 * gib}},
                      B={"memory": {"set_bytes": 1 << 40, "free_bytes": 1 << 20}})
    ev = _time(boxes)
    assert ev.calibration["k_memory_cap"] == memory_cap({"A": {"memory": {"set_bytes": set_bytes,
                                                                          "free_bytes": 10 * gib}}}) == 112


def test_graphs_or_eager_is_the_baselines_choice():
    fast = {"fastest_graph_call_s": 5e-6, "capture_failures": []}
    slow = {"fastest_graph_call_s": 50e-6, "capture_failures": []}
    assert decide_timing_mode({"A": fast, "B": fast}, 10e-6)["graphs"] is True
    # a candidate that reports a fast call cannot turn graphs on: the baseline's 50 us call decides
    assert decide_timing_mode({"A": slow, "B": fast}, 10e-6)["graphs"] is False
    assert decide_timing_mode({"A": fast, "B": slow}, 10e-6)["graphs"] is True
    # it can only refuse capture, which makes both arms eager (an eager sample times more of each call, not less)
    failed = {"fastest_graph_call_s": None, "capture_failures": ["x"]}
    assert decide_timing_mode({"A": fast, "B": failed}, 10e-6)["graphs"] is False
    assert decide_timing_mode({"A": fast, "B": {}}, 10e-6)["graphs"] is False
    assert decide_timing_mode({"A": {}, "B": {}}, 10e-6) == {}  # a device without graphs
    assert decide_timing_mode({"A": fast, "B": fast}, 0.0)["graphs"] is False


def test_the_baselines_graph_choice_reaches_both_timing_sandboxes():
    """CUDA-like reports (graph probes made elsewhere): the mode both sandboxes are configured with is the
    baseline's, whatever the candidate's probe says."""
    probes = {"A": {"fastest_graph_call_s": 50e-6}, "B": {"fastest_graph_call_s": 2e-6}}
    boxes, _ = _boxes(50e-6, lambda i: 50e-6, 2e-6, lambda i: 2e-6)
    logs = boxes
    ev = _time(boxes, graph_below_s=10e-6, probes=probes)
    assert ev.mode["decision"]["graphs"] is False and "baseline" in ev.mode["decision"]["reason"]
    for box in logs.values():
        modes = [m["timing"] for cmd, m, _ in box.log if cmd == "configure" and "k" in m]
        assert modes and all(t.get("graphs") is False for t in modes)


def test_a_fixed_k_needs_an_exploratory_run(pytester: pytest.Pytester):
    """--autotune-k overrides the protocol's sample: a run that records it must say so in every row."""
    res = pytester.runpytest("--autotune", "--autotune-k=4", "-p", "no:cacheprovider")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    assert "--autotune-k=4 overrides the protocol's calls per sample: add --autotune-exploratory" in res.stderr.str()
    res = pytester.runpytest("--autotune", "--autotune-k=zero", "-p", "no:cacheprovider")
    assert res.ret == pytest.ExitCode.USAGE_ERROR and "give a number of calls per sample" in res.stderr.str()


def test_where_the_device_is_the_sandboxs_memory_k_fits_its_memory_limit():
    """On the CPU a round's sets live in the sandbox: kb36_RMSNorm_'s 268 MB tensors (536 MB a call, input and output)
    at the floor of 8 calls a sample took a sandbox past its 8 GiB limit. k stays within a quarter of the limit for
    both groups, below the floor where it must; a device that reports its own free memory is not bounded by it."""
    limit = PLAN.sandbox_memory_bytes
    assert limit == PROTO.sandbox.memory_mb << 20
    big = {"memory": {"set_bytes": 536 << 20, "free_bytes": None}}
    assert host_memory_cap(big, limit) == int(HOST_MEMORY_SHARE * limit // (2 * (536 << 20))) == 1
    assert host_memory_cap(big, limit, groups=1) == 3
    assert host_memory_cap({"memory": {"set_bytes": 8 << 20, "free_bytes": None}}, limit) == 128
    assert host_memory_cap({"memory": {"set_bytes": 536 << 20, "free_bytes": 1 << 40}}, limit) is None
    boxes, _ = _boxes(50e-3, lambda i: 50e-3, 50e-3, lambda i: 50e-3, A=big)
    ev = _time(boxes)
    assert ev.calls_per_sample == 1 < PLAN.min_calls_per_sample and ev.calibration["k_memory_cap"] == 1


def test_the_baselines_hold_decides_both_timing_sandboxes():
    """CUDA's head start: where the baseline's timing sandbox stopped holding during calibration, both sandboxes
    are configured without a hold; the candidate's own stop, or a capture probe's report, decides nothing."""
    held = {"head_start": "spin", "head_start_setting": "spin", "head_start_reason": ""}
    stopped = {"head_start": "off", "head_start_setting": "spin", "head_start_reason": "the hold ran out (3 ms)"}

    def configured(a_info: dict, b_info: dict, probes=None) -> list:
        boxes, _ = _boxes(5e-3, lambda i: 5e-3, 0.7e-3, lambda i: 0.7e-3, A={"timing_info": a_info},
                          B={"timing_info": b_info})
        ev = _time(boxes, probes=probes)
        return [ev.mode["decision"].get("head_start")] + [
            m["timing"].get("head_start") for box in boxes.values() for cmd, m, _ in box.log
            if cmd == "configure" and "k" in m]

    assert set(configured(stopped, held)) == {"off"}
    assert set(configured(held, stopped)) == {None}
    assert set(configured(held, held, probes={"A": stopped})) == {None}
