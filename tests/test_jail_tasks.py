"""The jail where there is no cgroup pids controller and the sandbox keeps root's uid, as on the GPU host:
a sandbox's processes counted by its pid namespace from the host's /proc (sandbox/members.py), the controller's
watch of helper processes and of the GPU's processes (measure/helper_watch.py), the task supervisor that bounds a
sandbox's tasks for uid 0 (sandbox/task_limit.py), the watchdog that only detects, the plan that picks them, and a
memory-only cgroup v2. Each defence here has its cheat end to end elsewhere: tests/test_jail.py's ``gpu-host``
session (setsid helper, fork bomb) and the GPU catalog (tests/cheats/gpu/softmax_rows)."""

from __future__ import annotations

import errno
import json
import os
import signal
import socket
import sys
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

as_root_on_linux = pytest.mark.skipif(not sys.platform.startswith("linux") or os.geteuid() != 0,
                                      reason="a pid namespace of its own needs root (or a user namespace) on Linux")


def _sandbox_with_setsid_helper() -> tuple[int, int]:
    """(pid of a process outside, host pid of the 'sandbox': init of a new pid namespace that left a double-forked
    setsid helper behind, as cheat_burn_setsid and the GPU helpers do)."""
    from pytest_autotune.sandbox import linux

    r, w = os.pipe()
    outer = os.fork()
    if outer == 0:
        try:
            linux.unshare(linux.CLONE_NEWPID)
            init = os.fork()
            if init == 0:
                if os.fork() == 0:
                    os.setsid()
                    if os.fork() == 0:
                        time.sleep(60)
                    os._exit(0)
                os.write(w, b"r")  # the helper is started (its parent exits: init adopts it)
                time.sleep(60)
                os._exit(0)
            os.write(w, str(init).encode().rjust(12))
            os.waitpid(init, 0)
        finally:
            os._exit(0)
    os.close(w)
    init = int(os.read(r, 12))
    os.read(r, 1)
    os.close(r)
    return outer, init


@as_root_on_linux
def test_a_setsid_helper_is_counted_by_the_pid_namespace_without_a_cgroup() -> None:
    """The sandbox's process group no longer holds a setsid helper; its pid namespace does, cgroup or not: the
    watch counts it, names it (its own session) and, where the driver lists it on the GPU, its CUDA context; a GPU
    process of nobody's is reported, not counted; the helper dies with the namespace."""
    from pytest_autotune.measure.helper_watch import HelperWatch, describe_helpers
    from pytest_autotune.measure.procstat import group_helpers
    from pytest_autotune.sandbox import members

    outer, init = _sandbox_with_setsid_helper()
    try:
        deadline = time.monotonic() + 10  # until the intermediate process has exited (a zombie) and the helper runs
        while time.monotonic() < deadline and not (len(members.tree(init)) == 3 and len(members.members(init)[0]) == 2):
            time.sleep(0.02)
        found, how = members.members(init)
        helpers = [p for p in found if p != init]
        assert how == "pid namespace" and len(helpers) == 1, (found, how)
        assert group_helpers(init) == 0  # what the count saw before: nothing
        # in its namespace the cheap walk sees it too (and the zombie, which it counts as a task, not as a helper)
        assert helpers[0] in members.tree(init) and members.tasks(init) == 3

        class Gpu:  # the driver's view: the helper holds 512 MiB and used the SMs; pid 1 is nobody's
            def running(self):
                return {os.getpid(): (0, 1 << 20), helpers[0]: (0, 512 << 20), 1: (0, 1 << 20)}

            def busy_since_last(self):
                return {helpers[0]: 97}

        box = SimpleNamespace(pid=init, cgroup=None, pool=SimpleNamespace(device="cuda"))
        base = SimpleNamespace(pid=outer, cgroup=None, pool=box.pool)
        watch = HelperWatch(box, base, gpu=Gpu())
        watch.before_sample("A")
        assert watch.after_round() == 1 and watch.after_round() == 1
        rep = watch.report()
        (h,) = rep["described"]
        assert h["pid"] == helpers[0] and h["own_session"] and h["first_seen"] == "before a baseline sample"
        assert h["gpu"] == {"device": 0, "bytes": 512 << 20, "sm_util_max": 97}
        assert [o["pid"] for o in rep["others_on_gpu"]] == [1] and rep["found_by"] == "pid namespace"
        text = describe_helpers(rep)
        assert f"pid {helpers[0]}" in text and "a session of its own" in text and "512 MiB" in text, text
    finally:
        os.kill(init, signal.SIGKILL)
        os.waitpid(outer, 0)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and members.info(helpers[0]) is not None:
        time.sleep(0.02)
    assert members.info(helpers[0]) is None  # the kernel ended it with the namespace's init


def test_the_gpu_watch_trusts_no_pid_when_the_driver_does_not_name_the_controller() -> None:
    """NVML speaks of the initial pid namespace's pids: where it does not list the controller (which holds a
    context), its pids would name the wrong processes here, and none is used."""
    from pytest_autotune.measure.helper_watch import HelperWatch

    class Gpu:
        def running(self):
            return {123456789: (0, 1 << 30)}

        def busy_since_last(self):
            return {}

    box = SimpleNamespace(pid=os.getpid(), cgroup=None, pool=SimpleNamespace(device="cuda"))
    watch = HelperWatch(box, box, gpu=Gpu())
    watch.before_sample("B")
    assert watch.after_round() == 0 and watch.gpu_pids_ok is False
    assert "not used" in watch.report()["gpu"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="seccomp is Linux only")
def test_the_task_supervisor_bounds_processes_and_threads_for_any_uid() -> None:
    """Under the task filter every new task waits for the controller's answer: at ``limit`` tasks a fork fails
    with EAGAIN (BlockingIOError, as pids.max answers) and so does a thread; nothing else is slowed."""
    from pytest_autotune.sandbox import linux, task_limit

    why = task_limit.unavailable()
    if why:
        pytest.skip(why)
    a, b = socket.socketpair()
    pid = os.fork()
    if pid == 0:
        out: dict = {}
        try:
            a.close()
            linux.set_no_new_privs()
            fd = task_limit.install()
            socket.send_fds(b, [b"x"], [fd])
            os.close(fd)
            b.recv(1)
            kids = []
            try:
                for _ in range(64):
                    k = os.fork()
                    if k == 0:
                        time.sleep(30)
                        os._exit(0)
                    kids.append(k)
            except OSError as e:
                out["fork"] = e.errno
            out["kids"] = len(kids)
            import threading

            try:
                threading.Thread(target=time.sleep, args=(0.01,)).start()
                out["thread"] = "started"
            except RuntimeError:
                out["thread"] = "refused"
            for k in kids:
                os.kill(k, signal.SIGKILL)
                os.waitpid(k, 0)
            threading.Thread(target=time.sleep, args=(0.01,)).start()  # below the bound again
            out["after"] = "started"
        except Exception as e:  # noqa: BLE001
            out["error"] = repr(e)
        b.sendall(json.dumps(out).encode())
        os._exit(0)
    b.close()
    _, fds, _, _ = socket.recv_fds(a, 8, 1)
    limiter = task_limit.TaskLimiter()
    limiter.add(fds[0], pid, 16)
    a.send(b"g")
    out = json.loads(a.recv(4096))
    os.waitpid(pid, 0)
    cpu = time.process_time()  # the sandbox is gone (its listener hangs up): the supervisor sleeps, it does not spin
    time.sleep(0.3)
    assert time.process_time() - cpu < 0.1
    stats = limiter.remove(fds[0])
    assert limiter.remove(fds[0]) == {}  # a second remove closes nothing (the number may name another file)
    assert out == {"fork": errno.EAGAIN, "kids": 15, "thread": "refused", "after": "started"}, (out, stats)
    assert stats["refused"] >= 2 and stats["peak_tasks"] <= 16, stats


def test_the_plan_bounds_tasks_for_root_keeping_its_uid(monkeypatch) -> None:
    """Root on CUDA keeps its uid: an rlimit binds nothing there. With a memory-only cgroup (no pids controller)
    the plan takes the task supervisor and stays full; without seccomp user notification it falls back to the
    watchdog, which only detects, and says so; losing the pid namespace loses the supervisor too."""
    from pytest_autotune.sandbox import jail_plan as J
    from pytest_autotune.sandbox import task_limit

    monkeypatch.setattr(J.sys, "platform", "linux")
    monkeypatch.setattr(J.os, "geteuid", lambda: 0)
    plan = replace(J.wanted_plan("preferred", "cuda", (), 1 << 30, 64), view=True, seccomp=True)
    monkeypatch.setattr(task_limit, "unavailable", lambda: "")
    assert J._task_bound(plan, "cgroup v2 memory", "") == "cgroup v2 memory + task supervisor"
    assert J._task_bound(plan, "cgroup v2", "") == "cgroup v2"
    bound = replace(plan, limits="cgroup v2 memory + task supervisor")
    assert bound.level == "full" and "cgroup v2 memory + task supervisor limits" in bound.describe()
    no_pid = J._without(bound, "cuda", "x")
    for _ in range(7):  # the CUDA ladder down to the pid namespace
        no_pid = J._without(no_pid, "cuda", "x")
    assert "pid" not in no_pid.namespaces and no_pid.limits == "cgroup v2 memory + task watchdog"
    monkeypatch.setattr(task_limit, "unavailable", lambda: "Linux 5.4 lacks SECCOMP_USER_NOTIF_FLAG_CONTINUE (5.5)")
    watch = J._without(replace(plan, limits=J._task_bound(plan, None, "")), "limits", "no cgroup")
    assert watch.limits == "task watchdog" and not watch.has("limits") and watch.level == "partial"
    assert "limits: nothing bounds the sandbox's tasks" in watch.warning()
    uid = replace(J.wanted_plan("preferred", "cpu", (), 1 << 30, 64), identity="uid", uid=64000, gid=64000)
    assert J._task_bound(uid, "cgroup v2 memory", "") == "cgroup v2 memory + rlimit"  # binds a uid of its own


def test_the_watchdog_kills_a_sandbox_past_the_bound_where_nothing_binds(monkeypatch, tmp_path) -> None:
    """Where nothing bounds the tasks the controller counts them while it waits and kills the sandbox past
    ``max_processes``: the error names the bound and that it only detects."""
    from pytest_autotune.sandbox import runner
    from pytest_autotune.sandbox.processes import SandboxFailure

    killed = []
    monkeypatch.setattr(runner, "tasks", lambda pid: 300)
    pool = SimpleNamespace(watch_tasks=True, max_processes=256, memory_bytes=1 << 30)
    handle = SimpleNamespace(pid=os.getpid(), kill=lambda: killed.append(True))
    box = runner.Sandbox(None, handle, tmp_path / "log", pool)  # type: ignore[arg-type]
    with pytest.raises(SandboxFailure) as err:
        box._watchdog()
    assert err.value.kind == "processes" and "300" in str(err.value) and "max_processes" in str(err.value)
    assert killed == [True]


def test_a_cgroup_v2_without_pids_still_limits_memory(monkeypatch, tmp_path: Path) -> None:
    """The GPU host's cgroup v2 has no pids controller: the session opens a memory-only group (memory.max, no
    pids.max) rather than none, and says so in its kind."""
    from pytest_autotune.sandbox import cgroups

    base = tmp_path / "cg"
    base.mkdir()
    (base / "cgroup.controllers").write_text("cpuset cpu io memory hugetlb\n")
    (base / "cgroup.subtree_control").write_text("")

    def fake_mkdir(self: Path, *a, **k) -> None:  # a real cgroupfs makes these files itself
        os.mkdir(self)
        (self / "cgroup.subtree_control").write_text("")
        (self / "cgroup.procs").write_text("")

    monkeypatch.setattr(cgroups, "_mounts", lambda: [(str(base), "cgroup2", set())])
    monkeypatch.setattr(cgroups, "_own_paths", lambda: {"": "/"})
    monkeypatch.setattr(Path, "mkdir", fake_mkdir)
    session = cgroups.CgroupSession.open(256 << 20, 64)
    assert session.kind == "cgroup v2 memory" and not session.pids
    group = session.create()
    d = group.dirs["v2"]
    assert (d / "memory.max").read_text() == str(256 << 20) and not (d / "pids.max").exists()
    assert (base / "cgroup.subtree_control").read_text() == "+memory"
