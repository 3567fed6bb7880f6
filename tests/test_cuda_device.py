"""The CUDA device (pytest_autotune/measure/devices/cuda/).

The helpers that need no GPU run everywhere. The tests marked ``cuda`` need a CUDA GPU and a CUDA build of
torch: they are skipped elsewhere (CI has no GPU) and run on the H200 by benchmarks/harness/gpu/run_h200.sh.
"""

from __future__ import annotations

import math

import pytest
import torch

from pytest_autotune.measure.devices import cuda as cuda_mod
from pytest_autotune.measure.devices.cuda import CudaDevice
from pytest_autotune.measure.devices.cuda import device as device_mod
from pytest_autotune.measure.devices.cuda import fingerprint as fingerprint_mod
from pytest_autotune.measure.devices.cuda import graphs as graphs_mod
from pytest_autotune.measure.devices.cuda import head_start as head_start_mod
from pytest_autotune.measure.devices.cuda import hold as hold_mod
from pytest_autotune.measure.devices.cuda import timing as timing_mod
from pytest_autotune.sandbox.tamper import TamperSnapshot

HAS_CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(
    not HAS_CUDA, reason=f"needs a CUDA GPU: torch {torch.__version__} sees none here (torch.cuda.is_available() "
    "is False); these run on the GPU host via benchmarks/harness/gpu/run_h200.sh")


# ------------------------------------------------------------------------------------- no GPU needed


def test_unavailable_reason_says_what_to_do():
    if HAS_CUDA:
        assert CudaDevice.unavailable_reason() is None
    else:
        why = CudaDevice.unavailable_reason()
        assert why and "--device=cuda" in why and "--device=cpu" in why


def test_flush_size_is_factor_times_l2(monkeypatch):
    dev = CudaDevice(options={"l2_flush_factor": 2})
    monkeypatch.setattr(dev, "l2_bytes", lambda: 60 * 1024 * 1024)
    assert dev.flush_bytes() >= 2 * 60 * 1024 * 1024
    assert dev.flush_bytes() % 4096 == 0
    dev3 = CudaDevice(options={"l2_flush_factor": 3.5})
    monkeypatch.setattr(dev3, "l2_bytes", lambda: 50 * 1000 * 1000)
    assert dev3.flush_bytes() >= 3.5 * 50 * 1000 * 1000
    low = CudaDevice(options={"l2_flush_factor": 0.25})  # never less than the L2 itself
    monkeypatch.setattr(low, "l2_bytes", lambda: 1 << 20)
    assert low.flush_bytes() >= 1 << 20


def test_signature_refuses_what_cannot_be_staged():
    x = torch.zeros(4)
    assert graphs_mod.signature([[x]]) is None  # a CPU tensor is not this device's input
    assert graphs_mod.signature([[[1, 2]]]) is None  # unhashable plain value


def test_static_copies_keep_geometry_and_values():
    base = torch.arange(20, dtype=torch.float32)
    x = base[1:13].view(3, 4)  # offset view into a larger storage (misaligned layouts stay misaligned)
    xt = torch.randn(4, 3).t()  # non-contiguous
    static = graphs_mod.static_copies([[x, xt, 7]])
    sx, sxt, seven = static[0]
    assert seven == 7
    assert sx.storage_offset() == x.storage_offset() and sx.stride() == x.stride()
    assert sx.untyped_storage().nbytes() == x.untyped_storage().nbytes()
    assert sx.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()
    assert torch.equal(sx, x) and torch.equal(sxt, xt) and sxt.stride() == xt.stride()
    y, yt = x + 100, xt * 3
    graphs_mod.stage(static, [[y, yt, 7]])
    assert torch.equal(sx, y) and torch.equal(sxt, yt)


def test_copy_tree_and_poison():
    out = (torch.ones(3), torch.arange(4), [torch.full((2,), 2.0)])
    kept = graphs_mod.copy_tree(out)
    graphs_mod.poison(out)
    assert torch.isnan(out[0]).all() and (out[1] == 0).all() and torch.isnan(out[2][0]).all()
    assert torch.equal(kept[0], torch.ones(3)) and torch.equal(kept[1], torch.arange(4))
    assert torch.equal(kept[2][0], torch.full((2,), 2.0))


def test_module_state_is_not_mutated_by_the_device():
    """The sandbox snapshots this module's globals and classes (tamper check): the device keeps its state on
    the instance, never in module globals."""
    mods = (cuda_mod, graphs_mod, device_mod, timing_mod, fingerprint_mod, head_start_mod, hold_mod)
    before = [{k: v for k, v in vars(m).items() if not k.startswith("__")} for m in mods]
    dev = CudaDevice(options={"graph_below_s": 1e-5})
    dev.timing_info()
    dev.configure_timing({"graphs": False, "reason": "test"})
    after = [{k: v for k, v in vars(m).items() if not k.startswith("__")} for m in mods]
    for b, a in zip(before, after):
        assert b.keys() == a.keys() and all(b[k] is a[k] for k in b)


def test_the_tamper_snapshot_watches_every_module_of_the_timing_code(monkeypatch):
    """The sandbox snapshots ``Device.tamper_modules()`` (sandbox/child.py): the CUDA timing code lives in
    device.py and timing.py, so both are watched -- a replaced graph helper or timing method is a tamper."""
    dev = CudaDevice(options={"graph_below_s": 1e-5})
    assert {m.__name__ for m in dev.tamper_modules()} >= {device_mod.__name__, timing_mod.__name__}
    before = TamperSnapshot.take(dev.timer_functions(), dev.tamper_modules())
    monkeypatch.setattr(timing_mod, "poison", lambda outputs: None)
    monkeypatch.setattr(timing_mod.CudaTiming, "_timed_eager", lambda self, fn, batches: None)
    changes = before.changes(TamperSnapshot.take(dev.timer_functions(), dev.tamper_modules()))
    assert f"{timing_mod.__name__}.poison" in changes
    assert f"{timing_mod.__name__}.CudaTiming._timed_eager" in changes
    assert f"{device_mod.__name__}.CudaTiming._timed_eager" in changes


# ------------------------------------------------------------------------------------- on a CUDA GPU


@pytest.fixture
def dev():
    d = CudaDevice(index=0, options={"l2_flush_factor": 2, "graph_below_s": 10e-6})
    d.setup(1)
    d.warm_runtime()
    return d


def _calibrate(d: CudaDevice, fn, make, n: int = 3) -> None:
    """What the schedule's calibration does: single-call samples, before any sample of k > 1 calls."""
    for _ in range(n):
        d.timed(fn, [make()])


def _relu_small():
    return [torch.randn(1 << 18).cuda()]  # 1 MiB: a couple of microseconds (drawn on the CPU, as the harness does)


class _Small(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x) * 2.0 + 1.0


@needs_cuda
def test_flush_buffer_is_at_least_twice_the_l2(dev):
    props = torch.cuda.get_device_properties(0)
    l2 = int(getattr(props, "L2_cache_size", 0) or 0)
    assert l2 > 0
    assert dev._flush is not None and dev._flush.numel() * 4 >= 2 * l2
    assert dev.timing_info()["l2_flush_bytes"] >= 2 * l2


@needs_cuda
def test_fingerprint_names_the_gpu(dev):
    fp = dev.fingerprint()
    for key in ("name", "sms", "capability", "total_memory", "l2_bytes", "torch", "torch_cuda", "driver",
                "nvidia_smi", "l2_flush_bytes"):
        assert key in fp, key
    assert fp["sms"] > 0 and fp["l2_bytes"] > 0
    assert "clocks.max.sm" in fp["nvidia_smi"], fp["nvidia_smi"]


@needs_cuda
def test_eager_sample_times_and_keeps_outputs(dev):
    m = _Small().cuda()
    batches = [[torch.randn(1 << 22).cuda()] for _ in range(4)]
    s = dev.timed(m, batches)
    assert s.seconds > 0 and s.host_seconds >= s.seconds
    for b, o in zip(batches, s.outputs):
        assert torch.equal(o, torch.relu(b[0]) * 2.0 + 1.0)


@needs_cuda
def test_graph_path_for_short_calls(dev):
    m = _Small().cuda()
    with torch.no_grad():
        _calibrate(dev, m, _relu_small)
        info = dev.timing_info()
        assert info["fastest_graph_call_s"] is not None and info["fastest_graph_call_s"] < 10e-6, info
        b1 = [_relu_small() for _ in range(16)]
        b2 = [_relu_small() for _ in range(16)]
        s1 = dev.timed(m, b1)
        s2 = dev.timed(m, b2)
        eager = dev._timed_eager(m, b1)
    info = dev.timing_info()
    assert info["mode"] == "graph", info
    assert info["graph_samples"] == 2 and info["captures"] >= 1
    # the outputs of each replay are the ones kept: correct, and not overwritten by the next replay
    for b, o in zip(b1, s1.outputs):
        assert torch.equal(o, torch.relu(b[0]) * 2.0 + 1.0)
    for b, o in zip(b2, s2.outputs):
        assert torch.equal(o, torch.relu(b[0]) * 2.0 + 1.0)
    ptrs = {o.data_ptr() for o in s1.outputs + s2.outputs}
    assert len(ptrs) == 32
    # graph-owned outputs hold no answer after a sample
    g = dev._graphs[0]
    assert all(torch.isnan(o).all() for o in g.outputs)
    # no launch gaps in a replay: faster per call than back-to-back eager launches of a ~2 us kernel
    assert s1.seconds < eager.seconds, (s1.seconds, eager.seconds)
    print(f"graph {s1.seconds / 16 * 1e6:.2f} us/call, eager {eager.seconds / 16 * 1e6:.2f} us/call, "
          f"inner events used: {info['inner_event_samples']}")


@needs_cuda
def test_graph_replays_do_not_hide_a_stale_answer(dev):
    """A call that returns a cached tensor (no kernel) replays to the cached values: the outputs kept are what
    the replay left, so the fingerprint check sees the wrong answer."""

    class Cached(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.cache = None

        def forward(self, x):
            if self.cache is None:
                self.cache = torch.relu(x) * 2.0 + 1.0
            return self.cache

    m = Cached().cuda()
    with torch.no_grad():
        _calibrate(dev, m, _relu_small)
        b = [_relu_small() for _ in range(8)]
        s = dev.timed(m, b)
    assert dev.timing_info()["mode"] == "graph"
    assert not any(torch.equal(o, torch.relu(x[0]) * 2.0 + 1.0) for x, o in zip(b, s.outputs))


def _timed_eagerly_as_relu(dev, m: torch.nn.Module) -> dict:
    """Times ``m`` (a ReLU) on eight small inputs after calibrating it: its graph capture must have failed, the arm be
    timed eagerly, and every timed output be ReLU's. The device's timing info."""
    with torch.no_grad():
        _calibrate(dev, m, _relu_small)
        b = [_relu_small() for _ in range(8)]
        s = dev.timed(m, b)
    info = dev.timing_info()
    assert info["mode"] == "eager" and info["capture_failures"], info
    for x, o in zip(b, s.outputs):
        assert torch.equal(o, torch.relu(x[0]))
    return info


@needs_cuda
def test_graph_capture_failure_falls_back_to_eager(dev):
    class Syncs(torch.nn.Module):
        def forward(self, x):
            y = torch.relu(x)
            torch.cuda.synchronize()  # not capturable
            return y

    info = _timed_eagerly_as_relu(dev, Syncs().cuda())
    assert info["graph_samples"] == 0
    # the process is still usable after the failed capture
    assert torch.equal(torch.ones(3, device="cuda").sum().cpu(), torch.tensor(3.0))


def test_a_replay_is_compared_with_its_call_nan_answers_included():
    """The capture probe's comparison (timing.outputs_differ) on the CPU: a replay that left the outputs as they
    were differs; rounding does not; NaN where the call answered NaN agrees, NaN where it answered a number differs.
    A call whose answer holds NaN used to crash the probe (``atol`` NaN: an H100 run, 2026-12-06), so an item
    errored instead of reaching the gates that judge NaN answers."""
    x = torch.linspace(-3, 3, 64)
    relu = torch.relu(x)
    differs = timing_mod.outputs_differ
    assert differs([torch.zeros_like(x)], [relu]) is not None
    assert differs([relu * (1 + 1e-6)], [relu]) is None
    with_nan = relu.clone()
    with_nan[::7] = float("nan")
    assert differs([with_nan.clone()], [with_nan]) is None
    assert differs([relu], [with_nan]) is not None and differs([with_nan], [relu]) is not None
    all_nan = torch.full_like(x, float("nan"))
    assert differs([all_nan.clone()], [all_nan]) is None
    inf = relu.clone()
    inf[3] = float("inf")
    assert differs([inf.clone()], [inf]) is None
    assert differs([torch.arange(4)], [torch.arange(4)]) is None
    assert differs([torch.arange(4)], [torch.arange(1, 5)]) is not None
    assert "number of tensors" in differs([relu, relu], [relu])
    assert "shapes or dtypes" in differs([relu[:3]], [relu])


@needs_cuda
def test_work_outside_the_current_stream_is_timed_eagerly(dev):
    """A kernel launched on a stream of its own runs while the capture is under way and is not in the graph: every
    replay would leave the outputs as they were (the public KernelBench leaderboard's ReLU, Swish and ELU kernels
    read zeros in graph-timed outputs on an H100). The probe replays onto poisoned outputs and compares with the call
    run eagerly: such an arm is timed eagerly, and its outputs are its answers."""

    class OwnStream(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.side = torch.cuda.Stream()

        def forward(self, x):
            y = torch.zeros_like(x)  # on the current stream: in the graph
            with torch.cuda.stream(self.side):  # no fork from the current stream: never in the graph
                torch.clamp(x, min=0.0, out=y)  # torch.relu has no out=
            self.side.synchronize()
            return y

    _timed_eagerly_as_relu(dev, OwnStream().cuda())


@needs_cuda
def test_slow_calls_stay_eager(dev):
    m = _Small().cuda()
    with torch.no_grad():
        _calibrate(dev, m, lambda: [torch.randn(1 << 26).cuda()], n=2)
        s = dev.timed(m, [[torch.randn(1 << 26).cuda()] for _ in range(2)])
    info = dev.timing_info()
    assert info["mode"] == "eager" and "eager" in info["reason"], info
    assert s.seconds > 20e-6


@needs_cuda
def test_side_stream_work_shows_in_host_time_not_event_time(dev):
    a = torch.randn(4096, 4096).cuda()

    class Honest(torch.nn.Module):
        def forward(self, x):
            return x @ a

    class SideStream(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.s = torch.cuda.Stream()

        def forward(self, x):
            self.s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(self.s):
                y = x @ a  # the real work, never joined back into the timed stream
            return y

    x = [[torch.randn(4096, 4096).cuda()] for _ in range(2)]
    with torch.no_grad():
        honest = [dev._timed_eager(Honest(), x) for _ in range(3)][-1]
        cheat = [dev._timed_eager(SideStream(), x) for _ in range(3)][-1]
    # honest: the host sees about what the events saw (plus the flush); side stream: the events see ~nothing
    assert honest.seconds > 0.5 * honest.host_seconds - 200e-6, (honest.seconds, honest.host_seconds)
    assert cheat.seconds < 0.2 * cheat.host_seconds, (cheat.seconds, cheat.host_seconds)
    assert cheat.host_seconds > 0.5 * honest.seconds


@pytest.fixture
def held():
    d = CudaDevice(index=0, options={"l2_flush_factor": 2, "graph_below_s": 10e-6, "head_start": "spin",
                                     "head_start_max_s": 0.003})
    d.setup(1)
    d.warm_runtime()
    return d


@needs_cuda
def test_the_spin_hold_runs_and_is_released_by_the_host(held):
    """On the GPU: the PTX loads, the kernel holds the stream until the host's release (not its deadline), and the
    sample times the calls alone."""
    info = held.timing_info()
    assert info["head_start"] == "spin", info["head_start_reason"]
    m = _Small().cuda()
    batches = [[torch.randn(1 << 22).cuda()] for _ in range(4)]
    with torch.no_grad():
        s = [held.timed(m, batches) for _ in range(3)][-1]
    assert s.head_start == "spin" and s.hold_expired is False and s.bound == "device", s
    assert s.hold_seconds is not None and s.hold_seconds < 0.003
    for b, o in zip(batches, s.outputs):
        assert torch.equal(o, torch.relu(b[0]) * 2.0 + 1.0)
    info = held.timing_info()
    print({k: info[k] for k in ("first_call_s_median", "enqueue_s_median", "hold_s_median", "release_lag_s_median")},
          f"event {s.event_seconds * 1e6:.1f} us")


@needs_cuda
def test_a_call_that_synchronises_inside_the_hold_does_not_hang(held):
    class Syncs(torch.nn.Module):
        def forward(self, x):
            y = torch.relu(x)
            torch.cuda.synchronize()
            return y

    m = Syncs().cuda()
    x = [[torch.randn(1 << 20).cuda()] for _ in range(2)]
    with torch.no_grad():
        first = held.timed(m, x)
        held.timed(m, x)
        third = held.timed(m, x)
    assert first.hold_expired is True and first.enqueue_seconds >= 0.0029  # the deadline counts from the kernel's start
    assert third.head_start == "off" and "ran out" in held.timing_info()["head_start_reason"]


@needs_cuda
def test_a_launch_bound_call_is_timed_by_its_host(held):
    """300 launches of a tiny kernel a call (~1.5 ms of host, inside the 3 ms hold): the host's enqueue is longer
    than the GPU's work, and the sample says so (bound "host": its time is the enqueue time)."""
    class Loop(torch.nn.Module):
        def forward(self, x):
            for _ in range(300):
                x = x + 1.0
            return x

    m = Loop().cuda()
    x = [[torch.zeros(256).cuda()]]
    with torch.no_grad():
        s = [held.timed(m, x) for _ in range(3)][-1]
    assert s.bound == "host" and s.seconds == s.enqueue_seconds > s.event_seconds, s


@needs_cuda
def test_side_stream_work_during_the_hold_shows_in_host_time(held):
    a = torch.randn(4096, 4096).cuda()

    class SideStream(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.s = torch.cuda.Stream()

        def forward(self, x):
            with torch.cuda.stream(self.s):  # not held, not joined: it runs while the timed stream waits
                y = x @ a
            return y

    x = [[torch.randn(4096, 4096).cuda()] for _ in range(2)]
    with torch.no_grad():
        cheat = [held._timed_eager(SideStream(), x) for _ in range(3)][-1]
    assert cheat.seconds < 0.2 * cheat.host_seconds, (cheat.seconds, cheat.host_seconds)


@needs_cuda
def test_persisting_l2_carve_out_is_reset_before_a_sample(dev):
    drv = dev._drv()
    assert drv.ok, drv.error
    most = dev.fingerprint().get("persisting_l2_max_bytes") or 0
    if most <= 0:
        pytest.skip("this GPU (or its virtualisation) offers no persisting-L2 carve-out")
    want = min(most, 4 << 20)
    rc = drv.set_persisting_limit(want)
    if rc != 0 or not drv.persisting_limit():
        pytest.skip(f"cuCtxSetLimit(PERSISTING_L2_CACHE_SIZE) refused here (CUresult {rc})")
    # a stream window that would keep the candidate's buffer resident across the flush
    buf = torch.empty(want // 4, dtype=torch.float32, device="cuda")
    stream = torch.cuda.Stream()
    _set_window(drv, stream.cuda_stream, buf.data_ptr(), want)
    m = _Small().cuda()
    before = dev.timing_info()["persisting_limit_resets"]
    x = torch.randn(1 << 20).cuda()
    torch.cuda.synchronize()
    with torch.cuda.stream(stream), torch.no_grad():
        dev.timed(m, [[x]])
    assert drv.persisting_limit() == 0
    assert dev.timing_info()["persisting_limit_resets"] == before + 1
    assert dev.timing_info()["persisting_l2_errors"] == 0
    assert _window_bytes(drv, stream.cuda_stream) == 0


def _set_window(drv, stream: int, ptr: int, nbytes: int) -> None:
    import ctypes

    class Window(ctypes.Structure):
        _fields_ = [("base_ptr", ctypes.c_void_p), ("num_bytes", ctypes.c_size_t), ("hitRatio", ctypes.c_float),
                    ("hitProp", ctypes.c_int), ("missProp", ctypes.c_int)]

    val = (ctypes.c_char * 64)()
    w = Window.from_buffer(val)
    w.base_ptr, w.num_bytes, w.hitRatio, w.hitProp, w.missProp = ptr, nbytes, 1.0, 2, 1  # PERSISTING, STREAMING
    rc = drv.lib.cuStreamSetAttribute(ctypes.c_void_p(stream), 1, val)
    assert rc == 0, f"cuStreamSetAttribute: CUresult {rc}"
    assert _window_bytes(drv, stream) == nbytes


def _window_bytes(drv, stream: int) -> int:
    import ctypes

    f = drv.lib.cuStreamGetAttribute
    f.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
    f.restype = ctypes.c_int
    val = (ctypes.c_char * 64)()
    assert f(ctypes.c_void_p(stream), 1, val) == 0
    return ctypes.c_size_t.from_buffer(val, 8).value


@needs_cuda
def test_tamper_snapshot_covers_the_measuring_state(dev):
    names = dev.timer_functions()
    for key in ("torch.cuda.Event.elapsed_time", "torch.cuda.CUDAGraph.replay", "torch.cuda.synchronize",
                "cuda.flush_buffer", "cuda.options", "torch.Tensor.zero_"):
        assert key in names, key
    assert math.isclose(names["cuda.flush_buffer.numel"] * 4, dev.flush_bytes())


# ------------------------------------------------------------------------------------- outputs by CUDA IPC

_IPC_CHILD = r"""
import json, sys, torch
from pytest_autotune.measure.devices.cuda import CudaDevice
d = CudaDevice(index=0)
d.setup(1)
d.warm_runtime()
base = torch.arange(1 << 20, dtype=torch.float32, device="cuda")
views = {"whole": base, "offset_view": base[1000:1000 + 4096].view(64, 64).t(), "bf16": base.to(torch.bfloat16)}
metas = {k: d.export_tensor(v) for k, v in views.items()}
for m in metas.values():
    m["handle"] = m["handle"].hex()
torch.cuda.synchronize()
print(json.dumps(metas), flush=True)
sys.stdin.readline()            # the controller took its first snapshot
base.mul_(-1.0)                 # a late write
torch.cuda.synchronize()
print("written", flush=True)
sys.stdin.readline()
"""


@needs_cuda
def test_ipc_export_is_read_in_place_and_bounds_checked(dev):
    """A sandbox's CUDA output reaches the controller as a 64-byte handle: the controller opens it, copies
    device-to-device, sees later writes on a second read, and refuses metadata that points outside the allocation."""
    import json
    import os
    import subprocess
    import sys

    from pytest_autotune.measure.devices.memfd import ExportError

    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    child = subprocess.Popen([sys.executable, "-c", _IPC_CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True, env=env)
    try:
        metas = json.loads(child.stdout.readline())
        for m in metas.values():
            m["handle"] = bytes.fromhex(m["handle"])
        expect = torch.arange(1 << 20, dtype=torch.float32, device="cuda")
        opened = {k: dev.open_export(m) for k, m in metas.items()}
        first = {k: e.snapshot() for k, e in opened.items()}
        assert torch.equal(first["whole"], expect)
        assert torch.equal(first["offset_view"], expect[1000:1000 + 4096].view(64, 64).t())
        assert torch.equal(first["bf16"], expect.to(torch.bfloat16))
        child.stdin.write("go\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "written"
        later = opened["whole"].snapshot()
        assert torch.equal(later, -expect) and torch.equal(first["whole"], expect)  # the first copy is ours
        for e in opened.values():
            e.close()
        # one element past the end of the allocation the handle maps (the caching allocator's whole segment, which
        # is what bounds the controller's reads: never beyond it, whatever the sandbox claims)
        past = metas["whole"]["alloc_size"] // 4 + 1
        lie = dict(metas["whole"], shape=[past], stride=[1], alloc_offset=0)
        with pytest.raises(ExportError, match="out of bounds"):
            dev.open_export(lie)
        lie = dict(metas["whole"], alloc_offset=metas["whole"]["alloc_size"])
        with pytest.raises(ExportError, match="out of bounds"):
            dev.open_export(lie)
        with pytest.raises(ExportError):
            dev.open_export(dict(metas["whole"], handle=b"\0" * 64))
        # the controller's CUDA context is still healthy after the refusals
        assert float(torch.ones(4, device="cuda").sum()) == 4.0
    finally:
        child.stdin.write("bye\n")
        child.stdin.flush()
        child.wait(timeout=30)
