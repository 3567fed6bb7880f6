"""The head start in every CUDA sample (pytest_autotune/measure/devices/cuda/head_start.py, hold.py), on a simulated
GPU (tests/cuda_fakes.py): the sample's order of operations, what stays in the number, the hold running out, the
fallbacks, what ``timing_info`` says, and an arm that works on a side stream while the stream is held. The GPU
numbers are the test's own, never a measurement; the same code runs on the H200 in tests/test_cuda_device.py."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from cuda_fakes import US, FakeDriver, FakeGPU, FakeStream, arm, fake_torch

from conftest import REPO
from pytest_autotune.gates.clocks import DeviceClockGate
from pytest_autotune.measure.devices.cuda import CudaDevice
from pytest_autotune.measure.devices.cuda import head_start as head_start_mod
from pytest_autotune.measure.devices.cuda import hold as hold_mod
from pytest_autotune.measure.devices.cuda import timing as timing_mod
from pytest_autotune.measure.devices.cuda.graphs import Graph
from pytest_autotune.measure.timing_records import RoundRecord, SampleRecord, TimingEvidence
from pytest_autotune.protocol import load_protocol

PROTO = load_protocol(REPO / "protocol.toml")
LIMIT = PROTO.devices.cuda.head_start_max_s


@pytest.fixture
def sim(monkeypatch) -> FakeGPU:
    gpu = FakeGPU()
    ft = fake_torch(gpu)
    for mod in (timing_mod, head_start_mod):
        monkeypatch.setattr(mod, "torch", ft)
    monkeypatch.setattr(timing_mod, "time", SimpleNamespace(perf_counter_ns=gpu.perf_counter_ns))
    return gpu


def device(gpu: FakeGPU, head_start: str = "spin", limit: float = LIMIT, driver=None) -> CudaDevice:
    dev = CudaDevice(options={"head_start": head_start, "head_start_max_s": limit, "graph_below_s": 0})
    dev._driver = driver if driver is not None else FakeDriver(gpu)  # type: ignore[assignment]
    dev.flush_l2 = lambda: gpu.kernel(40 * US, "flush", host_s=10 * US)  # type: ignore[method-assign]
    dev.configure_timing({"graphs": False, "reason": "test: eager"})
    dev._head_start_setup()
    return dev


def _since_last_sample(log: list) -> list:
    return log[max(i for i, x in enumerate(log) if x == "kernel flush"):]


# ------------------------------------------------------------------------------------- the sample


def test_the_stream_is_held_until_the_first_call_is_queued(sim):
    dev = device(sim)
    s = dev.timed(arm(sim, host_s=20 * US, gpu_s=500 * US), [[0]] * 3)
    # host order: flush, its synchronisation, the hold (after an event that times it), the start event, the first
    # call's launches, the release, the other calls, the end event, a device-wide synchronisation
    assert _since_last_sample(sim.log) == ["kernel flush", "synchronize", "event", "hold spin hold", "event",
                                           "kernel call 0", "release", "kernel call 0", "kernel call 0", "event",
                                           "synchronize"]
    # GPU order: the start event runs when the hold ends, which is after the host released it
    hold = sim.first("spin hold")
    start, end = (o for o in sim.all_ops() if o.kind == "event" and o.start_ns >= hold.end_ns)
    calls = [o for o in sim.all_ops() if o.label == "call 0"]
    assert hold.end_ns >= hold.hold["release_ns"] >= calls[0].enq_ns and start.start_ns >= hold.end_ns
    assert calls[0].start_ns >= start.start_ns and end.start_ns >= calls[-1].end_ns
    # nothing but the calls is timed: back to back, no launch gap (the host queues call 2 while call 1 runs)
    assert s.seconds == pytest.approx(3 * 500 * US, abs=1 * US)
    assert s.bound == "device" and s.head_start == "spin" and s.hold_expired is False
    assert s.enqueue_seconds == pytest.approx(3 * 20 * US + 2 * US, abs=1 * US)
    assert s.first_call_seconds == pytest.approx(20 * US, abs=1 * US)
    assert s.event_seconds == s.seconds and s.hold_seconds >= s.first_call_seconds


def test_a_compiled_arms_host_path_before_its_first_kernel_is_off_the_clock(sim):
    """The H200's compiled anchors paid a fixed 182-286 us a sample on this path (docs/guide/anchors.md): here 240 us."""
    compiled = arm(sim, host_s=60 * US, gpu_s=1000 * US, first_extra_s=240 * US)
    off = device(sim, "off").timed(compiled, [[0]] * 4)
    held = device(sim, "spin").timed(compiled, [[0]] * 4)
    assert off.seconds - 4000 * US > 240 * US  # without a hold the GPU idles while the host gets going
    assert held.seconds == pytest.approx(4000 * US, abs=1 * US)
    assert off.bound == "device" and off.head_start == "off" and off.enqueue_seconds < off.seconds


def _ratio(gpu: FakeGPU, setting: str, limit: float, ref: dict, cand: dict, k: int, n: int = 4) -> tuple:
    a, b = device(gpu, setting, limit), device(gpu, setting, limit)
    ra = [a.timed(arm(gpu, **ref, label="ref"), [[0]] * k) for _ in range(n)]
    rb = [b.timed(arm(gpu, **cand, label="cand"), [[0]] * k) for _ in range(n)]
    return ra[-1], rb[-1], a, b


# Per call: (host seconds, GPU seconds, launches), chosen so that the reference's host time per call is what the
# H200 read for it without a hold (docs/data/gpu-h200-2026-12-03/suite/run1.json: 959 us and 3.20 ms a call at
# k = 23 and 5); the GPU parts are the test's guesses (an 8 MB slice-add ~6 us, a 512^3 fp32 matmul ~5.5 us).
LAUNCH_BOUND = {
    "09_sum_dim": ({"host_s": 959 * US, "gpu_s": 390 * US, "launches": 65},
                   {"host_s": 10 * US, "gpu_s": 134 * US, "launches": 1}, 23),
    "12_batched_small_matmul": ({"host_s": 3200 * US, "gpu_s": 710 * US, "launches": 129},
                                {"host_s": 10 * US, "gpu_s": 722 * US, "launches": 1}, 5),
}


@pytest.mark.parametrize("problem", sorted(LAUNCH_BOUND))
def test_a_launch_bound_reference_keeps_its_host_cost(sim, problem):
    """A Python loop of small launches costs its host time in any real use. The events after the release miss the
    first call's host time; the sample counts max(event, enqueue), so the ratio is the one the H200 read without a
    hold, for both arms by the same rule, and the reference's samples say they were bound by the host."""
    ref, cand, k = LAUNCH_BOUND[problem]
    old_a, old_b, _, _ = _ratio(sim, "off", LIMIT, ref, cand, k)
    old = old_a.seconds / old_b.seconds
    a, b, dev_a, dev_b = _ratio(sim, "spin", LIMIT, ref, cand, k)
    assert a.seconds / b.seconds == pytest.approx(old, rel=0.03)
    info_a, info_b = dev_a.timing_info(), dev_b.timing_info()
    assert info_b["head_start"] == "spin" and info_b["hold_expiries"] == 0 and info_b["host_bound_samples"] == 0
    if ref["host_s"] < LIMIT:  # 09: one call's 65 launches (959 us) fit in the hold; every sample held
        assert info_a["head_start"] == "spin" and info_a["host_bound_samples"] == 4 and a.bound == "host"
        assert a.event_seconds / b.event_seconds < old * (1 - 0.5 / k)  # the events alone: a call's host time short
    else:  # 12: one call's 129 launches take 3.2 ms, past the 3 ms deadline: two expiries, then no hold
        assert info_a["head_start"] == "off" and "ran out" in info_a["head_start_reason"]
        assert info_a["hold_expiries"] == 2 and info_a["host_bound_samples"] >= 2


def test_a_call_that_synchronises_ends_the_hold_at_its_deadline_then_samples_without_it(sim):
    def syncing(*_):
        sim.kernel(200 * US, "work", host_s=10 * US)
        sim.synchronize()  # .item(), or cudaDeviceSynchronize in an extension: waits for the held GPU
        return 0

    dev = device(sim)
    first = dev.timed(syncing, [[0]] * 2)
    assert first.hold_expired is True and first.bound == "host"
    assert first.enqueue_seconds >= LIMIT  # the host's wait for the deadline is in the number, not hidden
    dev.timed(syncing, [[0]] * 2)
    info = dev.timing_info()
    assert info["head_start"] == "off" and info["hold_expiries"] == 2
    third = dev.timed(syncing, [[0]] * 2)
    assert "hold spin hold" not in _since_last_sample(sim.log) and third.head_start == "off"
    assert third.seconds == pytest.approx(third.enqueue_seconds) and third.seconds < 1e-3


def test_more_launches_than_the_queue_holds_do_not_deadlock(sim):
    sim.queue_cap = 1024
    dev = device(sim)
    s = dev.timed(arm(sim, host_s=1200 * US, gpu_s=3000 * US, launches=1500), [[0]])
    assert "queue full" in sim.log and s.hold_expired is True
    assert s.enqueue_seconds < LIMIT + 2e-3  # the host waited for the deadline, not for ever


def test_graph_mode_holds_the_stream_before_the_replay(sim, monkeypatch):
    dev = device(sim)
    fn = arm(sim, 0, 0)
    inner = (sim_event := fake_torch(sim).cuda.Event)(), sim_event()

    def replay():
        sim.advance(15 * US)
        inner[0].record()
        for i in range(50):
            sim.kernel(4 * US, "node")
        inner[1].record()

    for name in ("stage", "poison"):
        monkeypatch.setattr(timing_mod, name, lambda *a: None)
    monkeypatch.setattr(timing_mod, "copy_tree", lambda o: sim.kernel(2 * US, "copy out"))
    monkeypatch.setattr(timing_mod, "signature", lambda batches: ("key",))
    dev._graphs.append(Graph(fn, ("key",), SimpleNamespace(replay=replay), [], [0], inner))
    dev.configure_timing({"graphs": True, "reason": "test: graph"})
    s = dev.timed(fn, [[0]] * 50)
    log = _since_last_sample(sim.log)
    assert log[:5] == ["kernel flush", "synchronize", "event", "hold spin hold", "event"]
    last_node = max(i for i, x in enumerate(log) if x == "kernel node")
    assert last_node < log.index("release") < log.index("kernel copy out")
    assert s.seconds == pytest.approx(50 * 4 * US, abs=1 * US) and dev.timing_info()["inner_event_samples"] == 1
    assert s.head_start == "spin" and s.bound == "device"


def test_timing_info_says_which_hold_ran_and_how_samples_were_made(sim):
    dev = device(sim)
    for _ in range(3):
        dev.timed(arm(sim, host_s=30 * US, gpu_s=1e-3), [[0]] * 3)
    info = dev.timing_info()
    assert info["head_start"] == "spin" and info["head_start_setting"] == "spin" and info["head_start_reason"] == ""
    assert info["head_start_max_s"] == LIMIT and info["sample_time"] == "max(event, enqueue)"
    assert info["held_samples"] == 3 and info["hold_expiries"] == 0 and info["host_bound_samples"] == 0
    assert 90 * US <= info["enqueue_s_median"] <= info["enqueue_s_max"] < 200 * US
    assert info["first_call_s_median"] == pytest.approx(30 * US, abs=1 * US)
    assert info["hold_s_median"] >= info["first_call_s_median"] and 0 <= info["release_lag_s_median"] < 50 * US
    old = device(sim, "off").timing_info()
    assert old["head_start"] == "off" and old["sample_time"] == "event" and old["head_start_max_s"] is None


# ------------------------------------------------------------------------------------- fallbacks


def test_no_hold_where_the_spin_kernel_cannot_be_set_up(sim):
    good = FakeDriver(sim)
    hold, why = hold_mod.make_hold("spin", good, 0, LIMIT)
    assert isinstance(hold, hold_mod.SpinHold) and why == "" and good.loaded[0][1] == hold_mod.HOLD_KERNEL
    assert hold.blocks == 132 * 4  # an H200: 132 SMs x 2048 resident threads / 512
    jit = FakeDriver(sim, ptx_error="ptxas application ptx input, line 9; fatal")
    hold, why = hold_mod.make_hold("spin", jit, 0, LIMIT)
    assert hold is None and "ptxas" in why
    hold, why = hold_mod.make_hold("spin", SimpleNamespace(ok=False, error="libcuda not found"), 0, LIMIT)
    assert hold is None and "libcuda not found" in why
    assert hold_mod.make_hold("off", good, 0, LIMIT) == (None, "")


def test_a_device_without_the_hold_says_so_and_keeps_the_rule(sim):
    dev = device(sim, driver=FakeDriver(sim, ptx_error="unsupported PTX version"))
    s = dev.timed(arm(sim, host_s=20 * US, gpu_s=800 * US), [[0]] * 2)
    info = dev.timing_info()
    assert info["head_start"] == "off" and "unsupported PTX version" in info["head_start_reason"]
    assert info["head_start_setting"] == "spin" and info["sample_time"] == "max(event, enqueue)"
    assert s.head_start == "off" and "hold spin hold" not in _since_last_sample(sim.log)


def test_a_launch_that_fails_stops_the_hold_and_says_why(sim):
    dev = device(sim, driver=FakeDriver(sim, rc=700))
    s = dev.timed(arm(sim, host_s=20 * US, gpu_s=800 * US), [[0]] * 2)
    info = dev.timing_info()
    assert s.head_start == "off" and info["hold_failures"] == 1 and "CUresult 700" in info["head_start_reason"]
    assert info["head_start"] == "off" and info["sample_time"] == "max(event, enqueue)"


# ------------------------------------------------------------------------------------- an arm hiding work in the hold


def _evidence(base: list, cand: list) -> TimingEvidence:
    ev = TimingEvidence(calls_per_sample=3)
    rec = lambda arm_, g, s: SampleRecord(arm_, g, 0, s.seconds, s.host_seconds, (0, 0), (0, 0), None, None,  # noqa: E731
                                          None, 0)
    for r, (a1, a2, b1, b2) in enumerate(zip(base[::2], base[1::2], cand[::2], cand[1::2])):
        ev.rounds.append(RoundRecord(r, "ABBA", {}, {}, (rec("A", "p1", a1), rec("B", "p1", b1),
                                                         rec("B", "p2", b2), rec("A", "p2", a2))))
    return ev


def _gate(base: list, cand: list):
    ctx = SimpleNamespace(timing=_evidence(base, cand), device=SimpleNamespace(name="cuda"), protocol=PROTO,
                          evidence=SimpleNamespace(device_clock=None))
    return DeviceClockGate().check(ctx, "integrity")  # type: ignore[arg-type]


def _side_stream_cheat(gpu: FakeGPU, spin_share: float):
    """Launch the real work on a stream of its own (its inputs were ready at the synchronisation, so it need not wait
    for the held stream), wait on the host for ``spin_share`` of it, then join it into the timed stream (or not,
    at 0)."""
    side, main = FakeStream(gpu), FakeStream(gpu, 1)

    def cheat(*_):
        gpu.kernel(1000 * US, "hidden", stream=side.cuda_stream, host_s=10 * US)
        gpu.advance(spin_share * 1000 * US)
        if spin_share:
            main.wait_stream(side)
        return 0

    a, b = device(gpu), device(gpu)
    honest = arm(gpu, host_s=10 * US, gpu_s=1000 * US)
    base = [a.timed(honest, [[0]] * 3) for _ in range(16)]
    cand = [b.timed(cheat, [[0]] * 3) for _ in range(16)]
    speedup = sorted(x.seconds for x in base)[8] / sorted(x.seconds for x in cand)[8]
    return speedup, _gate(base, cand), base, a, honest


@pytest.mark.parametrize("spin_share", [0.0, 0.2, 0.5, 1.0])
def test_work_on_a_side_stream_during_the_hold_is_caught_or_gains_nothing(sim, spin_share):
    """The cheat (``_side_stream_cheat``) tries to run its work while the timed stream is held. The hold fills
    every SM, so the other stream's kernels wait for the release like the timed stream's: joined, they are inside
    the events; not joined, they run past the end event and the host time with the device-wide synchronisation
    sees them (DeviceClockGate). What the host waited is in the enqueue time (max(event, enqueue)). On this fake
    GPU: 94x and refused at 0; 1.00x at 0.2 and 0.5; 0.99x (refused: its own wait is host time beyond the
    events) at 1."""
    speedup, refused, base, a, honest = _side_stream_cheat(sim, spin_share)
    assert refused is not None or speedup <= 1.01, speedup
    if spin_share == 0.0:
        assert refused is not None and "outside the timed stream" in refused.reason
    else:
        assert speedup <= 1.01
    assert _gate(base, [a.timed(honest, [[0]] * 3) for _ in range(16)]) is None  # honest against honest passes


def test_an_honest_compiled_arm_passes_the_device_clock_gate(sim):
    """The first call's host path (guards, launcher: 240 us + 60 us here) is host time beyond the events now; it is
    one call's, so a compiled candidate against an eager baseline stays inside the gate's allowance."""
    a, b = device(sim), device(sim)
    eager = arm(sim, host_s=10 * US, gpu_s=1900 * US, label="eager")
    compiled = arm(sim, host_s=60 * US, gpu_s=1000 * US, first_extra_s=240 * US, label="compiled")
    base = [a.timed(eager, [[0]] * 2) for _ in range(16)]
    cand = [b.timed(compiled, [[0]] * 4) for _ in range(16)]
    assert cand[-1].first_call_seconds == pytest.approx(300 * US, abs=1 * US)
    assert _gate(base, cand) is None


def test_a_hold_of_one_thread_would_let_that_work_through(sim):
    """Why the hold fills the SMs: with nvbench's one-thread kernel the same cheat's stream runs beside the hold
    (1.20x at half its work waited for, and the gate passes it: within event_host_max_ratio)."""
    sim.hold_fills_sms = False
    speedup, refused, *_ = _side_stream_cheat(sim, 0.5)
    assert speedup > 1.15 and refused is None


# ------------------------------------------------------------------ the baseline decides whether both arms are held


def test_the_candidate_stops_holding_where_the_baselines_hold_ran_out(sim):
    """The H200 case (protocol 9's first pin, 2026-12-05): 12_batched_small_matmul's reference is a Python loop of
    ~5 ms of host time a call, past the 3 ms deadline, so its sandbox stops holding; the honest ``bmm`` (0.7 ms a
    call, ~0.3 ms of cold host path after the synchronisation) kept its hold, and at k = 1 (k from the baseline's
    calls) that host path was host time beyond the events in the candidate's samples and in none of the baseline's:
    refused as hidden work. The controller now turns the candidate's hold off too (``decide_head_start``): the same
    two arms pass, and the candidate's host path is on its own clock, as in any unheld sample."""
    from pytest_autotune.measure.sampling import decide_head_start

    loop = arm(sim, host_s=5000 * US, gpu_s=700 * US, launches=129, label="loop")
    bmm = arm(sim, host_s=10 * US, gpu_s=700 * US, first_extra_s=300 * US, label="bmm")
    a, b = device(sim), device(sim)
    for _ in range(3):  # calibration: two expiries in a row and the baseline's sandbox stops holding
        a.timed(loop, [[0]])
        b.timed(bmm, [[0]])
    infos = {"A": a.timing_info(), "B": b.timing_info()}
    assert infos["A"]["head_start"] == "off" and infos["B"]["head_start"] == "spin"
    asymmetric = _gate([a.timed(loop, [[0]]) for _ in range(16)], [b.timed(bmm, [[0]]) for _ in range(16)])
    assert asymmetric is not None and "outside the timed stream" in asymmetric.reason  # the defect, reproduced

    decision = decide_head_start(infos)
    assert decision["head_start"] == "off" and "baseline's sandbox stopped holding" in decision["head_start_reason"]
    for dev in (a, b):
        dev.configure_timing(decision)
    base = [a.timed(loop, [[0]]) for _ in range(16)]
    cand = [b.timed(bmm, [[0]]) for _ in range(16)]
    info_b = b.timing_info()
    assert info_b["head_start"] == "off" and "neither arm holds" in info_b["head_start_reason"]
    assert cand[-1].head_start == "off" and cand[-1].seconds >= 1000 * US - 1 * US  # its host path on its clock
    assert _gate(base, cand) is None


def test_only_the_baselines_sandbox_decides_the_hold():
    from pytest_autotune.measure.sampling import decide_head_start

    held = {"head_start": "spin", "head_start_setting": "spin", "head_start_reason": ""}
    stopped = {"head_start": "off", "head_start_setting": "spin", "head_start_reason": "the hold ran out (3 ms)"}
    assert decide_head_start({"A": held, "B": stopped}) == {}  # the candidate's expiry costs only its own sandbox
    assert decide_head_start({"A": stopped, "B": held})["head_start"] == "off"
    assert decide_head_start({"A": {**stopped, "head_start_setting": "off"}, "B": held}) == {}  # protocols 1-8
    assert decide_head_start({"A": {}, "B": {}}) == {}  # devices without a hold (the CPU)
