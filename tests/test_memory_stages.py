"""Device memory across an item's processes, stage by stage, on a simulated 80 GB H100 (tests/memory_fakes.py): what
the plan counts (value patterns' temporaries, the controller's copies of the candidate's output, caches), the
probe stage of KernelBench's 47_Sum_reduction at its published size -- out of memory with every process keeping its
cache, as measured on an H100 at main 7bd485b, and within the plan with the caches given back -- and each stage's
start checked against the memory free then: a closed sandbox's memory waited for by its pid, a process the plan did
not know about named in an error before the stage runs, with the sizes that would fit."""

from __future__ import annotations

import dataclasses
import weakref
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Optional

import pytest
import torch
from memory_fakes import GIB, Box, SimDevice, SimGpu, SimOOM, SimProcess, controller_pid
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from conftest import REPO
from pytest_autotune import item_memory, memory_holders
from pytest_autotune.item_memory import PlannedGolden, fitting_sizes, stage_start
from pytest_autotune.measure.memory import (
    LAYOUT_BUILD,
    CallFootprint,
    DeviceMemory,
    DoesNotFit,
    pattern_peak,
    plan_memory,
)
from pytest_autotune.problems.footprint import meta_footprint
from pytest_autotune.problems.inputs import PATTERNS, apply_layout, apply_pattern
from pytest_autotune.problems.loader import LoadedProblem
from pytest_autotune.problems.model import SourceFile
from pytest_autotune.protocol import load_protocol

H100_TOTAL = 81559 << 20  # nvidia-smi's 81559 MiB
ANCHORS = REPO / "benchmarks" / "kernels" / "anchors"


def h100_memory(free: int) -> DeviceMemory:
    return DeviceMemory(free_bytes=free, total_bytes=H100_TOTAL, headroom_bytes=int(0.05 * H100_TOTAL),
                        process_bytes=GIB, what="H100")


def published(name: str) -> tuple[LoadedProblem, CallFootprint]:
    problem = LoadedProblem.load(SourceFile.read(next(ANCHORS.glob(f"{name}*.py"))))
    fp, why = meta_footprint(problem, {}, 0)
    assert why is None
    return problem, fp


# ------------------------------------------------------------------------------------ what one input's build holds

class LivePeak(TorchDispatchMode):
    """The largest number of tensor bytes alive at once while it is active (views counted once per storage)."""

    def __init__(self) -> None:
        super().__init__()
        self.live: dict[int, list] = {}
        self.now = self.peak = 0

    def track(self, t: Any) -> None:
        if not isinstance(t, torch.Tensor):
            return
        st = t.untyped_storage()
        ptr, n = st.data_ptr(), st.nbytes()
        if not ptr or not n:
            return
        entry = self.live.setdefault(ptr, [n, 0])
        if entry[1] == 0:
            self.now += n
            self.peak = max(self.peak, self.now)
        entry[1] += 1
        weakref.finalize(t, self._drop, ptr)

    def _drop(self, ptr: int) -> None:
        entry = self.live[ptr]
        entry[1] -= 1
        if entry[1] == 0:
            self.now -= entry[0]
            del self.live[ptr]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            self.track(t)
        return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("layout", list(LAYOUT_BUILD))
def test_the_plan_holds_every_value_pattern_and_layout_at_their_peak(dtype: torch.dtype, layout: str) -> None:
    # the probes build an input as problems/inputs.materialize does: the draw, its pattern, its layout. The plan
    # counts max(pattern_peak, build(layout)) inputs for it, and held(layout) once built; protocol 9 counted 2
    for name in PATTERNS:
        m = LivePeak()
        with m:
            x = torch.rand(64, 512, dtype=dtype)
            size = x.numel() * x.element_size()
            y = apply_pattern(x, {"name": name, "scale": 1e3, "seed": 3}, None)
            del x
            z = apply_layout(y, layout)
            del y
            held = m.now
        del z
        build, keep = LAYOUT_BUILD[layout]
        bound = max(build, pattern_peak(torch.empty((), dtype=dtype).element_size()))
        slack = 8  # the offset layout's one element more
        assert m.peak <= bound * size + slack, (name, m.peak / size, bound)
        assert held <= keep * size + slack, (name, held / size, keep)
    assert pattern_peak(4) == 4 and pattern_peak(2) == 6  # mixed_magnitude's int64 exponents: 2 + 8 / bytes


# ------------------------------------------------------------------------------------ the probe stage, simulated

#: the allocations of problems/inputs.py apply_pattern, in order, in multiples of the input ("-name": freed)
PATTERN_STEPS = {
    "negative": [("abs", 1), ("out", 1), ("-abs",)],  # -t.abs()
    "alternating_sign": [("abs", 1), ("out", 1), ("-abs",)],  # t.abs().reshape(-1).clone()
    "large": [("out", 1)],
    "zeros": [("out", 1)],
    # int64 exponents, their copy in the input's dtype, 10 ** them, the product
    "mixed_magnitude": [("i64", 2), ("exps", 1), ("-i64",), ("pow", 1), ("out", 1), ("-exps",), ("-pow",)],
}


def build_input(p: SimProcess, size: int, pattern: Optional[str], layout: str, release: bool) -> Any:
    """One input as problems/inputs.materialize builds it, allocation by allocation (apply_pattern, apply_layout),
    the cached blocks given back after each step where the plan says so."""
    x = p.alloc(size)  # the draw
    if pattern:
        live: dict = {}
        for step in PATTERN_STEPS[pattern]:
            if step[0].startswith("-"):
                p.free(live.pop(step[0][1:]))
            else:
                live[step[0]] = p.alloc(int(step[1] * size))
        p.free(x)
        x = live.pop("out")
        if release:
            p.empty_cache()
    if layout != "contiguous":
        y = p.alloc({"stride": 2 * size, "offset": size + 4, "transpose": size}[layout])
        p.free(x)
        x = y
        if release:
            p.empty_cache()
    return x


def probe_stage(gpu: SimGpu, sandbox: SimProcess, controller: SimProcess, fp: CallFootprint,
                recipes: list[tuple[Optional[str], str]], release: bool) -> None:
    """The probe calls of one item, golden outputs computed during the candidate's (gates/probes.py): the sandbox
    (sandbox/child.py h_outputs) and the controller (PlannedGolden, then gates/received.py's two copies)."""
    i, o, w = fp.input_bytes, fp.output_bytes, fp.work_bytes
    out = golden = None
    for pattern, layout in recipes:
        sandbox.free(out)  # the last output, alive until this request
        xs = build_input(sandbox, i, pattern, layout, release)
        clone = sandbox.alloc(i)  # the mutation check's copy
        controller.free(golden)
        if release:
            controller.empty_cache()
        xg = build_input(controller, i, pattern, layout, release)
        ws, out = sandbox.alloc(w), sandbox.alloc(o)
        wg, golden = controller.alloc(w), controller.alloc(o)
        for p, ts in ((sandbox, (ws, xs, clone)), (controller, (wg, xg))):
            for t in ts:
                p.free(t)
            if release:
                p.empty_cache()
        first, later = controller.alloc(o), controller.alloc(o)
        controller.free(later)
        controller.free(first)


#: gates/probes.py's six explicit recipes, then two a hypothesis draw can make
PROBES = [("negative", "contiguous"), ("alternating_sign", "contiguous"), ("mixed_magnitude", "contiguous"),
          (None, "transpose"), ("large", "contiguous"), ("zeros", "contiguous"),
          ("negative", "offset"), ("mixed_magnitude", "offset")]


def test_published_sum_reduction_probes_ran_out_with_caches_kept_and_fit_with_the_plan() -> None:
    # KernelBench level1/47_Sum_reduction_over_a_dimension at its published size: an 8 GiB input, a 2 MiB output
    _, fp = published("47_Sum")
    gpu = SimGpu(H100_TOTAL)
    controller = gpu.process("controller", controller_pid())
    sandbox = gpu.process("sandbox", 4242)
    mem = h100_memory(gpu.free())
    # protocol 9's plan said the probes needed 50 GiB of 74.6 (the H200's record of this item: needs.probes 50.0)
    # and kept every cache: the blocks of the patterned inputs' temporaries and of the offset layout's buffer (one
    # element more than the input: no cached block holds it) stay reserved in both processes, and one of them runs
    # out with the other's cache holding what it needs (on the H100: "5.8-11.8 GiB were free")
    with pytest.raises(SimOOM):
        probe_stage(gpu, sandbox, controller, fp, PROBES, release=False)
    assert sandbox.reserved + controller.reserved > mem.available - 2 * GIB > 50 * GIB
    plan = plan_memory(fp, mem, k_wanted=200)
    assert plan.release_between_calls and plan.golden_concurrent and "stride" in plan.layouts
    assert any("cached blocks back" in n for n in plan.notes)
    gpu = SimGpu(H100_TOTAL)
    controller, sandbox = gpu.process("controller", controller_pid()), gpu.process("sandbox", 4242)
    gpu.peak = 0
    probe_stage(gpu, sandbox, controller, fp, PROBES, release=True)
    assert gpu.peak <= plan.needs["probes"] + 64 * (2 << 20) <= mem.available  # rounding of each block to 2 MiB


def test_the_controller_holds_its_golden_output_and_two_copies_of_the_candidates() -> None:
    # 36_RMSNorm_ at its published size (7 GiB in, 7 GiB out, a 7 GiB x ** 2): once the candidate's call returned,
    # the controller holds the golden output and the candidate's output twice (gates/received.py)
    _, fp = published("36_RMSNorm_")
    fp = dataclasses.replace(fp, work_bytes=fp.input_bytes)
    plan = plan_memory(fp, h100_memory(H100_TOTAL - GIB), k_wanted=200)
    x, o = GIB, fp.output_bytes
    assert plan.needs["correctness"] >= (x + 3 * o) + (x + 2 * fp.input_bytes + o + fp.work_bytes)
    assert plan.release_between_calls and max(plan.needs.values()) <= plan.available_bytes


def test_planned_golden_outputs_give_the_controllers_cached_blocks_back_around_each_computation(
        tmp_path: Path) -> None:
    import e2e_files as F

    from pytest_autotune.measure.devices.cpu import CpuDevice

    p = tmp_path / "relu.py"
    p.write_text(F.RELU)
    device = CpuDevice()
    calls: list[str] = []
    device.release_cached_memory = lambda: calls.append("release")  # type: ignore[method-assign]
    golden = PlannedGolden(LoadedProblem.load(SourceFile.read(p)), device, {}, 0)
    golden({"seed": 1})
    assert calls == []  # a roomy plan: nothing given back
    golden.release_each = True
    golden({"seed": 2, "values": [{"name": "negative"}], "layout": ["stride"]})
    # before, after the pattern, after the layout, after the output
    assert calls == ["release"] * 4


# ------------------------------------------------------------------------------------ each stage's start

def sim_env(gpu: SimGpu, controller: SimProcess, started: dict) -> SimpleNamespace:
    proto = load_protocol(REPO / "protocol.toml")
    return SimpleNamespace(device=SimDevice(gpu, controller), protocol=proto, device_spec=SimpleNamespace(name="cuda"),
                           pool=SimpleNamespace(started=started, zygote_pid=None), gpu_processes=gpu, footprints={})


def sim_item(plan: Any, problem: Optional[LoadedProblem] = None) -> SimpleNamespace:
    ctx = SimpleNamespace(memory=plan, details={}, warnings=[])
    return SimpleNamespace(ctx=ctx, free_at_start=None, memory_plan=plan, problem=problem, sizes={}, init_seed=0)


def item_at_start(name: str = "47_Sum") -> tuple[SimGpu, SimProcess, Any, Any]:
    problem, fp = published(name)
    gpu = SimGpu(H100_TOTAL)
    controller = gpu.process("controller", controller_pid())
    plan = plan_memory(fp, h100_memory(gpu.free()), k_wanted=200)
    return gpu, controller, plan, problem


def test_a_closed_sandbox_still_holding_memory_is_waited_for_by_its_pid_before_the_next_stage() -> None:
    gpu, controller, plan, problem = item_at_start()
    # the plan was made on a free device; then a sandbox of the item closed, and the driver tears its 35 GiB down
    # over the next polls
    closing = gpu.process("correctness sandbox", 5151)
    closing.alloc(34 * GIB)
    closing.close(polls=6)
    env = sim_env(gpu, controller, {5151: ("47_Sum-correctness", Box(5151, closed=True))})
    item = sim_item(plan, problem)
    assert gpu.free() - int(0.05 * H100_TOTAL) < plan.needs["probes"], "started now, the stage would not fit"
    here = stage_start(env, item, "probes", "probes")
    assert here is not None and plan.needs["probes"] <= here.available
    rec = item.ctx.details["memory_stages"]["probes"]
    assert rec["waited_s"] > 0 and rec["need_bytes"] == plan.needs["probes"]
    assert 5151 not in env.pool.started, "a sandbox the driver no longer lists is forgotten"
    assert not item.ctx.warnings


def test_a_process_the_plan_did_not_count_is_an_error_before_the_stage_runs_naming_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memory_holders, "SETTLE_TIMEOUT_S", 0.2)
    gpu, controller, plan, problem = item_at_start()
    stuck = gpu.process("timing sandbox", 6161)
    stuck.alloc(40 * GIB)
    stuck.close(polls=10 ** 6)  # its context never goes within the wait
    other = gpu.process("another program", 7171)
    other.alloc(4 * GIB)
    env = sim_env(gpu, controller, {6161: ("baseline-47_Sum-p0", Box(6161, closed=True))})
    item = sim_item(plan, problem)
    with pytest.raises(DoesNotFit) as e:
        stage_start(env, item, "probes", "probes")
    msg = str(e.value)
    assert e.value.needed == plan.needs["probes"] and e.value.needed > e.value.available
    assert "sandbox 'baseline-47_Sum-p0' (closed) (pid 6161" in msg and "41.00 GiB" in msg
    assert "another process (pid 7171" in msg
    assert "it fits at batch_size = " in msg and "AUTOTUNE_SIZES" in msg
    assert item.ctx.warnings and "still held" in item.ctx.warnings[0]
    assert item.ctx.details["memory_settle"][0]["short_bytes"] == 41 * GIB
    roles = {p["pid"]: p["role"] for p in item.ctx.details["memory_holders"]["gpu_processes"]}
    assert roles[controller_pid()] == "the controller" and roles[7171] == "another process"


def test_the_controllers_cached_blocks_go_back_before_a_stage_is_measured() -> None:
    gpu, controller, plan, problem = item_at_start()
    held = controller.alloc(40 * GIB)
    controller.free(held)  # freed, still reserved by the controller's allocator
    env = sim_env(gpu, controller, {})
    item = sim_item(plan, problem)
    stage_start(env, item, "probes", "probes")
    assert controller.reserved == 0 and env.device.releases >= 1


def test_the_zygote_is_named_if_it_ever_holds_device_memory() -> None:
    gpu, controller, plan, problem = item_at_start()
    zygote = gpu.process("zygote", 8181)
    zygote.alloc(45 * GIB)
    env = sim_env(gpu, controller, {})
    env.pool.zygote_pid = 8181
    with pytest.raises(DoesNotFit, match=r"the sandbox zygote \(it must hold no device memory\) \(pid 8181"):
        stage_start(env, sim_item(plan, problem), "probes", "probes")


def test_a_pair_of_timing_sandboxes_is_planned_on_what_is_free_when_it_starts() -> None:
    # 19_ReLU at its published size: two groups of one 12 GiB set each on a free card; with 20 GiB taken by
    # another program before the second pair starts, half-rounds instead of an out-of-memory
    gpu, controller, plan, problem = item_at_start("19_ReLU")
    assert plan.groups_held == 2
    env = sim_env(gpu, controller, {})
    item = sim_item(plan, problem)
    stage_start(env, item, "timing", "timing")
    assert item.ctx.memory == plan
    gpu.process("another program", 9191).alloc(20 * GIB)
    stage_start(env, item, "timing-p1", "timing")
    assert item.ctx.memory.groups_held == 1 and item.memory_plan is plan
    rec = item.ctx.details["memory_stages"]["timing-p1"]
    assert rec["groups_held"] == 1 and rec["need_bytes"] <= gpu.free() - int(0.05 * H100_TOTAL)
    gpu.process("a larger program", 9292).alloc(30 * GIB)
    with pytest.raises(DoesNotFit, match="two timing sandboxes holding one input set"):
        stage_start(env, item, "timing-p2", "timing")


def test_the_sizes_that_would_fit_are_named_and_do_fit() -> None:
    problem, fp = published("36_RMSNorm_")
    mem = h100_memory(40 * GIB)
    with pytest.raises(DoesNotFit):
        plan_memory(fp, mem, k_wanted=200)
    env = SimpleNamespace(protocol=load_protocol(REPO / "protocol.toml"), device_spec=SimpleNamespace(name="cuda"))
    item = sim_item(None, problem)
    fits = fitting_sizes(env, item, fp, mem)
    assert fits.startswith("batch_size = ")
    batch = int(fits.split(",")[0].split("=")[1])
    small, _ = meta_footprint(problem, {"batch_size": batch}, 0)
    assert plan_memory(small, mem, k_wanted=200).budgeted
    with pytest.raises(DoesNotFit):
        plan_memory(meta_footprint(problem, {"batch_size": 2 * batch}, 0)[0], mem, k_wanted=200)
    assert item_memory.FIT_NAMES >= 2 and "or" in fits  # a second size is named too


def test_the_sandbox_a_stage_goes_on_using_is_counted_once() -> None:
    # the probes run in the correctness sandbox: what it holds now is part of the probe stage's own need; another
    # process holding as much is not
    gpu, controller, plan, problem = item_at_start()
    box = gpu.process("correctness sandbox", 4242)
    box.alloc(int(plan.available_bytes - plan.needs["probes"]) + 8 * GIB)
    env = sim_env(gpu, controller, {4242: ("47_Sum", Box(4242))})
    item = sim_item(plan, problem)
    stage_start(env, item, "probes", "probes", live=[Box(4242)])
    assert item.ctx.details["memory_stages"]["probes"]["live_bytes"] == box.context + box.reserved
    with pytest.raises(DoesNotFit, match=r"sandbox '47_Sum' \(pid 4242"):
        stage_start(env, item, "probes", "probes")
