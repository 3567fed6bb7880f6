"""The build pool end to end (docs/guide/compiled-candidates.md, "Builds in parallel"): a session's compiled
candidates are built side by side before its first item, each item then reads its build from the cache; a build
that fails still refuses its item with the compiler's first error; ``-k`` builds the selected items only; two xdist
workers never build one key twice; a ``--dist`` mode without workers still builds in the pool;
``--autotune-build-workers=0`` leaves each item to build its own.

The candidates are small C++ translation units without torch's headers (well under a second each on 2 cores). Each
prints a line when it is imported, so every build sandbox leaves a log in the pools' folder (a private TMPDIR):
counting the build sandboxes' logs counts the builds, across processes.
"""

from __future__ import annotations

import json
import os
from types import SimpleNamespace

import e2e_files as F
import jsonschema
import pytest

from conftest import REPO, ModuleRequest, fast_protocol_text

SCHEMA = json.loads((REPO / "pytest_autotune" / "report" / "report.schema.json").read_text())

CPP = '''"""ReLU in C++ through load_inline ({name})."""
import ctypes

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

print("BUILD-MARK {name}", flush=True)
SOURCE = r"""
#include <cstdint>
extern "C" void relu_f32(const float* x, float* y, int64_t n) {{
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] < 0.0f ? 0.0f : x[i];
}}
"""
_lib = ctypes.CDLL(load_inline("pool_{name}", cpp_sources=SOURCE, is_python_module=False, no_implicit_headers=True))


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        _lib.relu_f32(ctypes.c_void_p(x.data_ptr()), ctypes.c_void_p(y.data_ptr()), ctypes.c_int64(x.numel()))
        return y
'''
BROKEN = '''"""A C++ ReLU with a syntax error."""
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

print("BUILD-MARK cpp_broken", flush=True)
_lib = load_inline("pool_broken", cpp_sources="extern \\"C\\" int f() {\\n    return 1\\n}\\n", is_python_module=False,
                   no_implicit_headers=True)


class ModelNew(nn.Module):
    def forward(self, x):
        return x.clamp_min(0.0)
'''
# Cheat: from its build sandbox, write into the build cache's folder and overwrite the objects of every other build
# it can find under the test's folder (the pools' scratch folders where the jail gives no private /tmp), over and
# over while its neighbours build; then build an honest ReLU. Refused by the jail's view: the cache is hidden and
# read-only, each build's scratch folder is in its own /tmp (else the pool builds one at a time).
POISON = CPP.replace('print("BUILD-MARK {name}", flush=True)', """print("BUILD-MARK {name}", flush=True)
import glob
import os
import time


def _attempt(fn):
    try:
        fn()
    except Exception:
        pass


def _write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


for _ in range(30):
    for cache in glob.glob(os.path.join({root!r}, "*", "results.db.build")):
        _attempt(lambda: _write(os.path.join(cache, "f" * 64, "POISON"), b"POISON"))
        for entry in glob.glob(os.path.join(cache, "*", "files", "**", "*.so"), recursive=True):
            _attempt(lambda: _write(entry, b"POISON"))
    for so in glob.glob(os.path.join({root!r}, "**", "*.so"), recursive=True):  # the test's folders only
        if "pool_cpp_poison" not in so:
            _attempt(lambda: _write(so, b"POISON"))
    time.sleep(0.05)""")
GOOD = ("cpp_a", "cpp_b", "cpp_c", "cpp_poison")


def _session(pt: pytest.Pytester, name: str, *args: str) -> SimpleNamespace:
    """One session over the suite with a store (and a build cache) of its own and sandbox logs in a TMPDIR of its
    own."""
    tmp = pt.path / f"tmp-{name}"
    tmp.mkdir()
    old = os.environ.get("TMPDIR")
    os.environ["TMPDIR"] = str(tmp)
    try:
        res = pt.runpytest_subprocess("--problems=suite", f"--autotune-db={name}/results.db",
                                      f"--autotune-json={name}.json", "-p", "no:cacheprovider", *args, timeout=600)
    finally:
        if old is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = old
    report = pt.path / f"{name}.json"
    data = json.loads(report.read_text()) if report.exists() else {"items": []}
    if data["items"]:
        jsonschema.validate(data, SCHEMA)
    builds: dict[str, int] = {}
    for log in tmp.glob("autotune-sandbox-*/*-build.log"):
        for line in log.read_text(errors="replace").splitlines():
            if line.startswith("BUILD-MARK "):
                builds[line.split()[1]] = builds.get(line.split()[1], 0) + 1
    return SimpleNamespace(res=res, out=res.stdout.str(), items={i["candidate"]: i for i in data["items"]},
                           builds=builds, cache=pt.path / name / "results.db.build")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest):
    mp = pytest.MonkeyPatch()
    try:
        pt = pytest.Pytester(ModuleRequest(request), tmp_path_factory, mp, _ispytest=True)  # type: ignore[arg-type]
        folder = pt.path / "suite" / "candidates" / "relu"
        folder.mkdir(parents=True)
        (pt.path / "suite" / "relu.py").write_text(F.RELU)
        for name in GOOD[:-1]:
            (folder / f"{name}.py").write_text(CPP.format(name=name))
        (folder / "cpp_poison.py").write_text(POISON.format(name="cpp_poison", root=str(pt.path)))
        (folder / "cpp_broken.py").write_text(BROKEN)
        (pt.path / "protocol.toml").write_text(fast_protocol_text(**{"probes.max_examples": "0"}))
        yield SimpleNamespace(
            # correctness and probes only: the pool builds before the first item whether or not the run times
            # (build/prebuild.py), and timing four items here would add ~20 s of the suite and test nothing more
            whole=_session(pt, "whole"),
            selected=_session(pt, "selected", "-k", "cpp_c"),
            xdist=_session(pt, "xdist", "-n", "2"),
            # a --dist mode without -n (a project's addopts may carry one) distributes nothing: this process runs
            # the items and the pool builds for them
            dist_alone=_session(pt, "dist_alone", "--dist", "loadfile", "-k", "cpp_a"),
            off=_session(pt, "off", "--autotune-build-workers=0"))
    finally:
        mp.undo()


def test_every_build_is_made_by_the_pool_before_the_first_item(runs) -> None:
    t = runs.whole
    for name in GOOD:
        it = t.items[name]
        assert it["verdict"] == "accepted", it["reason"] + t.out[-3000:]
        b = it["details"]["build"]
        # built by this session's pool; the item found it in the cache, and started no build sandbox of its own
        assert (b["built_by"], b["cache"]) == ("pool", "hit"), b
        pool = b["pool"]
        assert pool["width"] >= 1 and pool["jobs"] >= 1 and pool["width"] * pool["jobs"] <= max(pool["cores"], 1)
        assert pool["seconds"] > 0 and pool["waited_s"] >= 0 and pool["queued_s"] >= 0
        assert "build" in it["details"]["wire"]  # the pool's build sandbox, counted on the item that uses it
    assert t.builds == {name: 1 for name in (*GOOD, "cpp_broken")}, t.builds
    lines = t.out.splitlines()
    done = next(i for i, ln in enumerate(lines) if ln.startswith("autotune: build pool done"))
    first_item = next(i for i, ln in enumerate(lines) if ln.startswith("suite/relu.py"))
    assert done < first_item, t.out[:3000]
    assert "5 compiled candidate(s)" in t.out and "4 built here" in t.out and "1 failed" in t.out


def test_a_build_cannot_reach_the_cache_or_the_builds_beside_it(runs) -> None:
    """cpp_poison wrote wherever it could reach while the others built: nothing of it landed, and every build it
    aimed at was accepted with its own objects."""
    for session in (runs.whole, runs.xdist, runs.off):
        assert not list(session.cache.rglob("POISON")), session.out[-2000:]
        for so in session.cache.rglob("*.so"):
            assert so.read_bytes() != b"POISON", so
        for name in GOOD:
            assert session.items[name]["verdict"] == "accepted", session.items[name]["reason"]


def test_a_failed_build_still_refuses_its_item_with_the_compilers_first_error(runs) -> None:
    it = runs.whole.items["cpp_broken"]
    assert (it["verdict"], it["gate"]) == ("rejected", "build"), it
    assert it["reason"].startswith("main.cpp:2:") and "pool_broken" in it["reason"], it["reason"]
    b = it["details"]["build"]
    assert b["built_by"] == "pool" and b["cache"] == "miss" and "main.cpp:2:" in b["log"]
    assert "REJECTED by build: main.cpp:2:" in runs.whole.out
    entries = [p.name for p in runs.whole.cache.iterdir() if not p.name.startswith(".")]
    assert len(entries) == len(GOOD) and b["key"] not in entries  # a failure is never cached


def test_only_the_selected_items_are_built(runs) -> None:
    s = runs.selected
    assert set(s.items) == {"cpp_c"} and s.items["cpp_c"]["verdict"] == "accepted", s.out[-3000:]
    assert s.builds == {"cpp_c": 1}, s.builds
    assert [p.name for p in s.cache.iterdir() if not p.name.startswith(".")] == [
        s.items["cpp_c"]["details"]["build"]["key"]]
    assert "building 1 compiled candidate(s)" in s.out


def test_two_xdist_workers_never_build_one_key_twice(runs) -> None:
    x = runs.xdist
    assert set(x.items) == {*GOOD, "cpp_broken"}, x.out[-3000:]
    assert x.builds == {name: 1 for name in (*GOOD, "cpp_broken")}, x.builds
    for name in GOOD:
        b = x.items[name]["details"]["build"]
        assert x.items[name]["verdict"] == "accepted" and b["cache"] == "hit", x.items[name]
        assert b["built_by"] in ("pool", "other_process") and b["pool"]["workers"] == 2, b
    broken = x.items["cpp_broken"]
    assert (broken["verdict"], broken["gate"]) == ("rejected", "build") and broken["reason"].startswith("main.cpp:2:")


def test_a_dist_mode_without_workers_still_builds_in_the_pool(runs) -> None:
    """``--dist loadfile`` alone (xdist installed, no ``-n`` or ``--tx``): xdist distributes nothing, so this process
    is no controller; it runs the item, and the pool built it first (before pytest_autotune/xdist_role.py the plugin
    read ``--dist`` alone and left each item to build its own)."""
    d = runs.dist_alone
    assert set(d.items) == {"cpp_a"} and d.items["cpp_a"]["verdict"] == "accepted", d.out[-3000:]
    b = d.items["cpp_a"]["details"]["build"]
    assert (b["built_by"], b["cache"]) == ("pool", "hit"), b
    assert "building 1 compiled candidate(s)" in d.out and d.builds == {"cpp_a": 1}, (d.builds, d.out[-3000:])


def test_without_the_pool_each_item_builds_its_own(runs) -> None:
    o = runs.off
    assert "build pool" not in o.out
    for name in GOOD:
        b = o.items[name]["details"]["build"]
        assert (b["built_by"], b["cache"]) == ("item", "miss") and "pool" not in b, b
    assert o.items["cpp_broken"]["reason"].startswith("main.cpp:2:")
    assert o.builds == {name: 1 for name in (*GOOD, "cpp_broken")}, o.builds
