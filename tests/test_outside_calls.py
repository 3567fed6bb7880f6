"""No candidate code may run outside its own calls (docs/design/threat-model.md): each cheat of that family, shown to WORK
against a harness without the defence (in this process, with the harness's own helpers), next to the defence
that stops it. The end-to-end verdicts are in tests/test_cheat_catalog.py.
"""

from __future__ import annotations

import gc
import importlib.util
import signal
import sys
import time
from pathlib import Path

import pytest
import torch

from pytest_autotune.problems.inputs import materialize
from pytest_autotune.problems.loader import LoadedProblem
from pytest_autotune.problems.model import SourceFile
from pytest_autotune.sandbox.child import HarnessRefusal, h_prepare
from pytest_autotune.sandbox.outputs import harness_reads, mode_stack_depths, output_problem
from pytest_autotune.sandbox.tamper import TamperSnapshot

CHEATS = Path(__file__).resolve().parent / "cheats"
PROBLEM = LoadedProblem.load(SourceFile.read(CHEATS / "problems" / "softmax_rows.py"))


def _cheat(name: str):
    path = CHEATS / "candidates" / "softmax_rows" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"_cheat_{name}", path)
    mod = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    sys.modules[spec.name] = mod  # as the sandbox's loader registers candidate modules
    spec.loader.exec_module(mod)
    return mod


def _x(seed: int = 1) -> torch.Tensor:
    return materialize(PROBLEM, {"seed": seed})[0]


@pytest.mark.parametrize("name", ["cheat_lazy_torch_function", "cheat_lazy_dispatch"])
def test_lazy_output_defers_work_to_a_naive_reader_and_not_to_ours(name):
    mod = _cheat(name)
    x = _x()
    expect = torch.softmax(x, dim=-1)
    # without the defence: the call returns with half the rows undone, and an ordinary read finishes them
    out = mod.ModelNew()(x)
    naive = out.clone()  # what a harness reading outputs with tensor methods sees: correct, computed late
    assert torch.allclose(naive, expect)
    # with it: the type is refused before any method runs, and a read with torch functions disabled never
    # triggers the deferred half
    out = mod.ModelNew()(x)
    assert "subclass of torch.Tensor" in output_problem(out, "cpu")
    if name == "cheat_lazy_torch_function":
        with harness_reads():
            raw = torch.Tensor._make_subclass(torch.Tensor, out)  # the storage as it is
            assert not torch.allclose(raw, expect)
            assert torch.allclose(raw[: x.shape[0] // 2], expect[: x.shape[0] // 2])


def test_mode_left_pushed_precomputes_while_inputs_are_built_and_the_sandbox_refuses_to_build_then():
    mod = _cheat("cheat_mode_precompute")  # pushes its mode at import
    try:
        assert mode_stack_depths()["torch_function"] >= 1
        mod._answers.clear()
        materialize(PROBLEM, {"seed": 5})  # a harness that builds inputs with the mode on the stack
        assert mod._answers, "the mode saw the input being built and computed the answer ahead of the call"
        st = _child_state()
        with pytest.raises(HarnessRefusal, match="mode"):  # the sandbox will not build inputs under a mode
            h_prepare(st, {"p1": [{"seed": 1}], "p2": [{"seed": 2}]})
    finally:
        mod._mode.__exit__(None, None, None)
    assert mode_stack_depths()["torch_function"] == 0


def _child_state():
    from pytest_autotune.sandbox.child import ChildState

    init = {"role": "candidate", "threads": 1, "problem": PROBLEM.src.wire(), "source": None, "class_name": "ModelNew",
            "init_seed": 1, "sizes": {}, "disable_gc": False,
            "device": {"target": "pytest_autotune.measure.devices.cpu:CpuDevice", "index": 0, "options": {}}}
    return ChildState(init)


def test_finalizer_runs_where_the_output_is_freed():
    mod = _cheat("cheat_finalizer_burn")
    ran = []
    orig = mod._burn
    mod._burn = lambda: ran.append(time.thread_time()) or orig()
    out = mod.ModelNew()(_x())
    assert not ran
    t0 = time.thread_time()
    del out  # in a one-process harness this is the other arm's time; here it is the candidate's own prepare
    gc.collect()
    assert ran and time.thread_time() - t0 > 0.0005


def test_instance_patch_reaches_a_baseline_in_the_same_process_only():
    mod = _cheat("cheat_baseline_below_limit")
    baseline = PROBLEM.build_reference(0)
    mod.ModelNew.found = None
    mod.ModelNew()(_x())
    assert mod.ModelNew.found >= 1 and "slow" in getattr(baseline.forward, "__name__", "")
    # the sandbox that runs the candidate builds no baseline: a fresh process holding only the candidate's arm
    del baseline
    gc.collect()
    mod.ModelNew.found = None
    mod.ModelNew()(_x())
    assert mod.ModelNew.found == 0


@pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="needs POSIX interval timers")
def test_signal_handlers_and_timers_are_in_the_tamper_snapshot():
    before = TamperSnapshot.take()
    old = signal.getsignal(signal.SIGALRM)
    try:
        mod = _cheat("cheat_signal_timer")
        changed = before.changes(TamperSnapshot.take())
        assert "setting:signal handlers" in changed and "setting:signal interval timers" in changed
        del mod
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0, 0)
        signal.signal(signal.SIGALRM, old)


def test_gc_callbacks_are_in_the_tamper_snapshot():
    before = TamperSnapshot.take()
    n = len(gc.callbacks)
    try:
        _cheat("cheat_gc_callback")
        assert "setting:gc.callbacks" in before.changes(TamperSnapshot.take())
    finally:
        del gc.callbacks[n:]


@pytest.mark.parametrize("mode", ["zygote", "spawn"])
def test_the_sandbox_exits_without_running_atexit_handlers(tmp_path, mode):
    """A candidate's atexit handler would run after its item, beside the next one: sandboxes leave with os._exit."""
    marker = tmp_path / "atexit-ran.txt"
    cand = tmp_path / "cand.py"
    cand.write_text(
        "import atexit, torch\nfrom torch import nn\n"
        f"atexit.register(lambda: open({str(marker)!r}, 'w').write('ran'))\n"
        "class ModelNew(nn.Module):\n    def forward(self, x):\n        return torch.softmax(x, dim=-1)\n")
    from pytest_autotune.sandbox.runner import SandboxPool

    pool = SandboxPool(threads=1, timeout_s=60, memory_mb=4096, start_timeout_s=60, mode=mode)
    init = {"role": "candidate", "threads": 1, "problem": PROBLEM.src.wire(), "source": SourceFile.read(cand).wire(),
            "class_name": "ModelNew", "init_seed": 1, "sizes": {}, "disable_gc": True,
            "device": {"target": "pytest_autotune.measure.devices.cpu:CpuDevice", "index": 0, "options": {}}}
    try:
        box = pool.start(init, label="atexit")
        assert box.hello.get("ok"), box.hello
        box.close()
    finally:
        pool.close()
    time.sleep(0.2)
    assert not marker.exists()
    assert not pool.workdir.exists()  # nothing was printed: the pool's folder of empty logs goes with it
