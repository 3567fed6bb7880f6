"""The build pool's parts against scripted build sandboxes (no compiler): how wide it runs and how many compilers
each build gets, that it runs that many builds at once and never more, that a shared device's calls run one at a
time, and that two processes never build one key twice -- the second waits and reads the first's build, or its
failure (docs/guide/compiled-candidates.md, "Builds in parallel")."""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Optional

import pytest
import torch

from pytest_autotune.build.builder import Builder, BuildJob
from pytest_autotune.build.pool import PoolPlan, apart, one_at_a_time, plan_pool, run_pool, spread
from pytest_autotune.build.shared import KeyLock, RunRecords, clear_run, clear_stale
from pytest_autotune.problems.model import SourceFile
from pytest_autotune.protocol import PACKAGED_PROTOCOL, load_protocol

GIB = 1 << 30


@pytest.mark.parametrize("builds,cores,avail_gib,memory_mb,workers", list(itertools.product(
    (1, 3, 50), (1, 2, 16, 64), (None, 4, 24, 128), (2048, 8192), (1, 2, 4))))
def test_the_pool_never_oversubscribes_the_cores_or_the_memory(builds, cores, avail_gib, memory_mb, workers) -> None:
    avail = avail_gib * GIB if avail_gib else None
    p = plan_pool(builds, cores, avail, memory_mb, workers)
    share = max(1, cores // workers)
    assert 1 <= p.width <= builds and p.jobs >= 1
    assert p.width * p.jobs <= share  # compilers at once, this process's share of the cores
    if avail is not None:  # the builds at their memory limits fit in this process's share of MemAvailable
        assert p.width == 1 or p.width * memory_mb * 2**20 * workers <= 0.9 * avail
    # as wide as the three bounds allow, and the cores left over go to each build's compilers
    assert p.width == max(1, min(builds, share, p.memory_width)) and p.jobs == max(1, share // p.width)


def test_the_width_can_be_set_and_a_few_builds_get_many_compilers() -> None:
    assert plan_pool(3, 16, 128 * GIB, 8192).width == 3 and plan_pool(3, 16, 128 * GIB, 8192).jobs == 5
    p = plan_pool(50, 16, 128 * GIB, 8192)
    assert (p.width, p.jobs) == (14, 1) and "memory" in p.why  # 0.9 x 128 GiB holds 14 builds of 8 GiB
    assert plan_pool(50, 16, 128 * GIB, 8192, override=4).width == 4
    assert plan_pool(2, 16, 128 * GIB, 8192, override=4).width == 2


def test_builds_run_side_by_side_only_where_they_cannot_reach_each_other() -> None:
    from pytest_autotune.sandbox.jail_plan import JailPlan

    assert apart(JailPlan(isolation="full", view=True, namespaces=("pid", "mount")))
    for jail in (JailPlan(), JailPlan(isolation="full", view=True, namespaces=("mount",)),
                 JailPlan(isolation="full", view=False, namespaces=("pid", "mount"))):
        assert not apart(jail)
    narrowed = one_at_a_time(plan_pool(8, 16, 128 * GIB, 8192), "no private /tmp")
    assert (narrowed.width, narrowed.jobs, narrowed.why) == (1, 16, "no private /tmp")


def test_each_worker_starts_at_its_own_place_and_builds_every_job() -> None:
    jobs = [SimpleNamespace(key=str(i)) for i in range(7)]
    orders = [spread(jobs, w, 3) for w in range(3)]  # type: ignore[arg-type]
    assert all(sorted(o, key=lambda j: int(j.key)) == jobs for o in orders)
    assert len({o[0].key for o in orders}) == 3
    assert spread(jobs, 0, 1) == jobs  # type: ignore[arg-type]


def test_a_key_lock_excludes_another_holder_until_it_is_released(tmp_path: Path) -> None:
    a, b = KeyLock(tmp_path, "k"), KeyLock(tmp_path, "k")
    assert a.acquire(block=False) is not None
    assert b.acquire(block=False) is None  # another holder: come back later
    got: list[Optional[float]] = []
    t = threading.Thread(target=lambda: got.append(b.acquire(block=True)))
    t.start()
    time.sleep(0.2)
    assert t.is_alive()  # still waiting
    a.release()
    t.join(10)
    assert got and got[0] is not None and got[0] >= 0
    b.release()


# ---------------------------------------------------------------------------------------------- scripted sandboxes
class Box:
    """A build sandbox that answers like the real one; it counts how many are alive and how many are in their call."""

    def __init__(self, sandbox: "Sandboxes") -> None:
        self.s = sandbox
        self.hello = {"ok": True}
        self.chan = SimpleNamespace(stats=SimpleNamespace(as_dict=lambda: {"bytes": 1}))
        self.handle = SimpleNamespace(kill=lambda: None)
        self.sent: list[dict] = []

    def __enter__(self) -> "Box":
        return self

    def __exit__(self, *exc: Any) -> None:
        with self.s.lock:
            self.s.alive -= 1

    def request(self, msg: dict, timeout: Optional[float] = None, phase: str = "") -> dict:
        self.sent.append(msg)
        s = self.s
        if msg.get("stage") == "import":
            if s.barrier is not None:
                s.barrier.wait()  # every builder of the width must be here at once, or this times out
            time.sleep(s.import_s)
            return {"ok": True, "imported": True}
        with s.lock:
            s.calling += 1
            s.max_calling = max(s.max_calling, s.calling)
        s.release.wait(10)
        time.sleep(s.call_s)
        with s.lock:
            s.calling -= 1
        return {"ok": True, "calls": [], "failures": s.failures, "files": {"ext/x.so": torch.ones(2, dtype=torch.uint8)},
                "bytes": 2, "raised": None, "trace": "", "triton_failed": False, "triton_root": None, "triton": None,
                "seconds": 0.01}


class Sandboxes:
    def __init__(self, barrier: Optional[int] = None, import_s: float = 0.0, call_s: float = 0.0,
                 failures: Optional[list] = None) -> None:
        self.lock = threading.Lock()
        self.alive = self.max_alive = self.calling = self.max_calling = self.started = 0
        self.barrier = threading.Barrier(barrier, timeout=20) if barrier else None
        self.import_s, self.call_s = import_s, call_s
        self.failures = failures or []
        self.release = threading.Event()
        self.release.set()
        self.boxes: list[Box] = []

    def start(self, init: dict, label: str = "", **limits: Any) -> Box:
        with self.lock:
            self.started += 1
            self.alive += 1
            self.max_alive = max(self.max_alive, self.alive)
        box = Box(self)
        self.boxes.append(box)
        return box


def _env(root: Path, pool: Sandboxes, run_id: str) -> SimpleNamespace:
    return SimpleNamespace(pool=pool, protocol=load_protocol(PACKAGED_PROTOCOL), build_root=root, run_id=run_id,
                           lock=SimpleNamespace(shared=contextlib.nullcontext))


def _job(i: int) -> BuildJob:
    cand = SourceFile(Path(f"c{i}.py"), b"from torch.utils.cpp_extension import load_inline\n", f"{i:064x}")
    return BuildJob(f"{i + 1:064x}", (("cxx", "g++"),), SourceFile(Path("p.py"), b"", "p" * 64), cand, {"n": 4},
                    1, 2, "ModelNew", f"p|c{i}|cpu")


def _builder(root: Path, pool: Sandboxes, run_id: Optional[str] = None, process: Optional[int] = None) -> Builder:
    """A process's builder (``process``: another process of the run than this one's)."""
    b = Builder(_env(root, pool, run_id or uuid.uuid4().hex), lambda job: {"role": "build"})  # type: ignore[arg-type]
    if process is not None:
        b.process = process
    return b


def _plan(width: int, jobs: int = 1) -> PoolPlan:
    return PoolPlan(width, jobs, width * jobs, width, 1, "test")


def test_the_pool_runs_its_width_at_once_and_never_more(tmp_path: Path) -> None:
    boxes = Sandboxes(barrier=3, import_s=0.05)
    results = run_pool(_builder(tmp_path, boxes), [_job(i) for i in range(6)], _plan(3, 2), device_shared=False)
    assert boxes.started == 6 and boxes.max_alive == 3  # the barrier of 3 was passed twice: 3 at once, never 4
    assert sorted(results) == sorted(_job(i).key for i in range(6))
    assert all(r.built_by == "pool" and r.where == "cache" and r.entry is None for r in results.values())
    assert all((tmp_path / k / "manifest.json").is_file() for k in results)
    # each build asked in two steps, with the pool's compilers in its init message
    assert [m.get("stage") for m in boxes.boxes[0].sent] == ["import", "call"]
    assert all(r.pool["jobs"] == 2 and r.queued_s >= 0 for r in results.values())


def test_a_shared_devices_calls_run_one_at_a_time_while_the_compilers_run_side_by_side(tmp_path: Path) -> None:
    boxes = Sandboxes(barrier=2, call_s=0.05)
    run_pool(_builder(tmp_path, boxes), [_job(i) for i in range(4)], _plan(2), device_shared=True)
    assert boxes.max_alive == 2 and boxes.max_calling == 1
    side = Sandboxes(barrier=2, call_s=0.2)
    run_pool(_builder(tmp_path / "cpu", side), [_job(i) for i in range(2)], _plan(2), device_shared=False)
    assert side.max_calling == 2  # on the CPU each call runs in its own sandbox's memory: side by side


def test_a_second_process_waits_for_the_first_and_reads_its_build(tmp_path: Path) -> None:
    run_id = uuid.uuid4().hex
    first, second = Sandboxes(), Sandboxes()
    first.release.clear()  # the first process's build hangs in its call until released
    a, b = _builder(tmp_path, first, run_id), _builder(tmp_path, second, run_id, process=-2)
    job = _job(0)
    out: dict = {}
    t = threading.Thread(target=lambda: out.setdefault("a", a.obtain(job, block=True, built_by="pool",
                                                                      keep_bytes=False, staged=True)))
    t.start()
    while first.calling == 0:
        time.sleep(0.01)
    assert b.obtain(job, block=False, built_by="pool", keep_bytes=False) is None  # it is being built: later
    waiter = threading.Thread(target=lambda: out.setdefault("b", b.obtain(job, block=True, built_by="pool",
                                                                          keep_bytes=False)))
    waiter.start()
    time.sleep(0.2)
    first.release.set()
    t.join(20)
    waiter.join(20)
    assert out["a"].built_by == "pool" and second.started == 0  # one build of the key, in all
    assert out["b"].built_by == "other_process" and out["b"].where == "cache" and out["b"].waited_s >= 0
    assert b.load(out["b"]).files == {"ext/x.so": b"\x01\x01"}  # type: ignore[union-attr]


def test_a_failure_is_read_by_the_runs_other_processes_and_cleared_with_the_run(tmp_path: Path) -> None:
    run_id = uuid.uuid4().hex
    bad = Sandboxes(failures=[{"error": "main.cpp:2:13: error: expected ';' before '}' token", "fn": "load_inline",
                               "name": "x"}])
    first = _builder(tmp_path, bad, run_id).obtain(_job(0), block=True, built_by="pool", keep_bytes=False)
    assert first is not None and first.failure is not None and first.failure.reason.startswith("main.cpp:2:13")
    assert not (tmp_path / _job(0).key).exists()  # never cached
    other = Sandboxes()
    again = _builder(tmp_path, other, run_id, process=-2).obtain(_job(0), block=True, built_by="pool",
                                                                  keep_bytes=False)
    assert again is not None and other.started == 0 and again.built_by == "other_process"
    assert (again.failure.verdict, again.failure.reason) == ("rejected", first.failure.reason)  # type: ignore
    assert "main.cpp:2:13" in again.log
    mine = _builder(tmp_path, Sandboxes(), run_id).obtain(_job(0), block=True, built_by="item", keep_bytes=False)
    assert mine is not None and mine.built_by == "cache"  # this process's own record: not another's
    later_run = _builder(tmp_path, Sandboxes(), uuid.uuid4().hex)  # a later run builds it again
    assert later_run.lookup(_job(0).key, keep_bytes=False)[0] is None
    assert RunRecords(tmp_path, run_id).failure(_job(0).key) is not None
    clear_run(tmp_path, run_id)
    assert RunRecords(tmp_path, run_id).failure(_job(0).key) is None
    (tmp_path / ".run-old").mkdir()
    clear_stale(tmp_path, now=time.time() + 2 * 24 * 3600)
    assert not (tmp_path / ".run-old").exists()
