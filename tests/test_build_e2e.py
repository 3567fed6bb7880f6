"""Compiled candidates end to end (docs/guide/compiled-candidates.md): C++ through ``load_inline`` on the CPU, in a
recording session under the jail, then a second session over the same store.

One module-scoped pair of sessions serves every test. The first holds a C++ ReLU that builds, one with a syntax
error, one whose source changes from process to process (so the build stage never saw what its later sandboxes
ask for) and one that reaches the loader without naming it; the second session measures the C++ ReLU again and
must find its build in the cache. The extensions are small translation units without torch's headers: each builds
in well under a second on 2 cores (a ``torch/extension.h`` build takes ~25 s there).
"""

from __future__ import annotations

import json
import sqlite3
import time
from types import SimpleNamespace

import e2e_files as F
import jsonschema
import pytest
import torch

from conftest import REPO, ModuleRequest, fast_protocol_text

SCHEMA = json.loads((REPO / "pytest_autotune" / "report" / "report.schema.json").read_text())

CPP_RELU = '''"""ReLU in C++ through load_inline."""
import ctypes

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

SOURCE = r"""
#include <cstdint>
extern "C" void relu_f32(const float* x, float* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] < 0.0f ? 0.0f : x[i];
}
"""
_lib = ctypes.CDLL(load_inline("e2e_relu", cpp_sources=SOURCE, is_python_module=False, no_implicit_headers=True,
                               extra_cflags=["-O3"]))


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        _lib.relu_f32(ctypes.c_void_p(x.data_ptr()), ctypes.c_void_p(y.data_ptr()), ctypes.c_int64(x.numel()))
        return y
'''
# fails in the compiler's first pass: no headers, so the build fails in well under a second
CPP_BROKEN = '''"""A C++ ReLU with a syntax error."""
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

SOURCE = r"""
extern "C" void relu_f32(const float* x, float* y, long n) {
    for (long i = 0; i < n; ++i) y[i] = x[i] < 0.0f ? 0.0f : x[i]
}
"""
_lib = load_inline("e2e_broken", cpp_sources=SOURCE, is_python_module=False, no_implicit_headers=True)


class ModelNew(nn.Module):
    def forward(self, x):
        return x.clamp_min(0.0)
'''
# honest code in the build stage, something else in every later process: what it asks for later was never built
CPP_DRIFT = CPP_RELU.replace('SOURCE = r"""', 'import os\nSOURCE = f"// {os.urandom(8).hex()}\\n" + r"""').replace(
    "e2e_relu", "e2e_drift")
# the loader reached by computed names: the source names no compiling API, so it gets no build stage
CPP_HIDDEN = '''"""Reaches torch's loader without naming it."""
import importlib

import torch
import torch.nn as nn

_ext = importlib.import_module("torch.utils.cpp_" + "extension")
_lib = getattr(_ext, "load_" + "inline")("e2e_hidden", cpp_sources="int f() { return 1; }",
                                          is_python_module=False, no_implicit_headers=True)


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.relu(x)
'''
CANDIDATES = {"cpp_relu": CPP_RELU, "cpp_broken": CPP_BROKEN, "cpp_drift": CPP_DRIFT, "cpp_hidden": CPP_HIDDEN}


def _session(pt: pytest.Pytester, report: str) -> tuple[pytest.RunResult, dict, float]:
    t0 = time.monotonic()
    res = pt.runpytest_subprocess("--autotune", "--autotune-exploratory", "--problems=suite",
                                  f"--autotune-json={report}", "-p", "no:cacheprovider", timeout=600)
    seconds = time.monotonic() - t0
    data = json.loads((pt.path / report).read_text()) if (pt.path / report).exists() else {"items": []}
    if data["items"]:
        jsonschema.validate(data, SCHEMA)  # details.build included
    return res, {i["candidate"]: i for i in data["items"]}, seconds


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest):
    mp = pytest.MonkeyPatch()
    try:
        pt = pytest.Pytester(ModuleRequest(request), tmp_path_factory, mp, _ispytest=True)  # type: ignore[arg-type]
        root = pt.path
        (root / "suite" / "candidates" / "relu").mkdir(parents=True)
        (root / "suite" / "relu.py").write_text(F.RELU)
        for name, text in CANDIDATES.items():
            (root / "suite" / "candidates" / "relu" / f"{name}.py").write_text(text)
        (root / "protocol.toml").write_text(fast_protocol_text(**{"probes.max_examples": "0"}))
        first, items1, s1 = _session(pt, "r1.json")
        for name in ("cpp_broken", "cpp_drift", "cpp_hidden"):
            (root / "suite" / "candidates" / "relu" / f"{name}.py").unlink()
        second, items2, s2 = _session(pt, "r2.json")
        print(f"build e2e sessions: {s1:.1f} s and {s2:.1f} s")
        yield SimpleNamespace(root=root, first=first, second=second, items1=items1, items2=items2)
    finally:
        mp.undo()


def test_a_cpp_candidate_is_built_once_and_accepted(built) -> None:
    it = built.items1["cpp_relu"]
    assert it["verdict"] == "accepted", it["reason"] + built.first.stdout.str()[-3000:]
    b = it["details"]["build"]
    # built by the session's build pool before the first item; the item read it from the cache
    assert (b["built_by"], b["cache"]) == ("pool", "hit"), b
    assert b["built"] == ["e2e_relu"] and b["flags"] == ["-O3"] and len(b["key"]) == 64
    assert b["compiler"].startswith(("c++", "g++", "gcc", "clang")) or "ninja" in b["compiler"]
    assert b["seconds"] > 0 and b["build_seconds"] > 0 and b["pool"]["seconds"] > b["build_seconds"]
    # one build sandbox; the correctness and timing sandboxes loaded its build (a compiler there is refused)
    assert "build" in it["details"]["wire"] and "candidate (timing)" in it["details"]["wire"]
    cache = built.root / ".autotune" / "build" / b["key"]
    manifest = json.loads((cache / "manifest.json").read_text())
    assert [c["name"] for c in manifest["calls"]] == ["e2e_relu"] and manifest["files"]


def test_a_second_run_builds_nothing(built) -> None:
    it = built.items2["cpp_relu"]
    assert it["verdict"] == "accepted", it["reason"] + built.second.stdout.str()[-3000:]
    b = it["details"]["build"]
    assert (b["cache"], b["built_by"]) == ("hit", "cache") and b["key"] == built.items1["cpp_relu"]["details"]["build"]["key"]
    assert "build" not in it["details"]["wire"]  # no build sandbox was started
    assert b["build_seconds"] == built.items1["cpp_relu"]["details"]["build"]["build_seconds"]


def test_a_build_failure_names_the_compilers_error_line(built) -> None:
    it = built.items1["cpp_broken"]
    assert (it["verdict"], it["gate"]) == ("rejected", "build")
    assert it["reason"].startswith("main.cpp:3:"), it["reason"]
    assert "error: expected" in it["reason"] and "e2e_broken" in it["reason"]
    assert "REJECTED by build: main.cpp:3:" in built.first.stdout.str()
    log = it["details"]["build"]["log"]
    assert "main.cpp:3:" in log and "ninja" in log and "autotune-build-" not in log
    with sqlite3.connect(built.root / ".autotune" / "results.db") as conn:
        (detail,) = conn.execute("SELECT detail FROM rejections WHERE candidate = 'cpp_broken'").fetchone()
    assert detail.startswith(it["reason"]) and "build log:" in detail and "main.cpp:3:" in detail.split("build log:")[1]


def test_a_call_the_build_stage_never_saw_is_refused(built) -> None:
    it = built.items1["cpp_drift"]
    assert (it["verdict"], it["gate"]) == ("rejected", "load"), it["reason"]
    assert "load_inline('e2e_drift') was not built in the build stage" in it["reason"]
    hidden = built.items1["cpp_hidden"]
    assert (hidden["verdict"], hidden["gate"]) == ("rejected", "load"), hidden["reason"]
    assert "had no build stage" in hidden["reason"] and "build" not in hidden["details"]


def test_the_build_stage_is_timed_apart_and_a_hit_costs_less(built) -> None:
    """The build stage's time is reported as a stage of its own (never the timing budget's), and a cache hit takes
    less of it than the build did (the pool's, before the first item)."""
    built_now = built.items1["cpp_relu"]["details"]
    hit = built.items2["cpp_relu"]["details"]
    assert hit["build"]["seconds"] < built_now["build"]["pool"]["seconds"]
    assert built_now["stage_seconds"]["build"] == built_now["build"]["seconds"]


CUDA_CANDIDATES = {"02_relu": ["relu_cuda"], "05_softmax": ["softmax_cuda", "softmax_triton"],
                   "07_layer_norm": ["layer_norm_cuda"]}


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="the CUDA C++ and Triton candidates need a CUDA device")
def test_cuda_and_triton_candidates_build_once_and_are_accepted(pytester: pytest.Pytester) -> None:
    """The bundled CUDA C++ candidates (ReLU, softmax, layer norm) and the Triton softmax, under the full jail: each
    is built once (nvcc, or Triton's compiler and autotuner, in the build sandbox), accepted, and found in the cache
    by a second session, which starts no build sandbox."""
    level1 = REPO / "benchmarks" / "kernels" / "level1"
    for problem, names in CUDA_CANDIDATES.items():
        (pytester.path / "suite" / "candidates" / problem / "cuda").mkdir(parents=True)
        (pytester.path / "suite" / f"{problem}.py").write_text((level1 / f"{problem}.py").read_text())
        for name in names:
            src = level1 / "candidates" / problem / "cuda" / f"{name}.py"
            (pytester.path / "suite" / "candidates" / problem / "cuda" / f"{name}.py").write_text(src.read_text())
    (pytester.path / "protocol.toml").write_text(fast_protocol_text(**{"probes.max_examples": "0"}))
    runs = []
    for report in ("r1.json", "r2.json"):
        res = pytester.runpytest_subprocess("--autotune", "--autotune-exploratory", "--device=cuda", "--problems=suite",
                                            f"--autotune-json={report}", "-p", "no:cacheprovider", timeout=1800)
        data = json.loads((pytester.path / report).read_text())
        runs.append({i["candidate"]: i for i in data["items"]})
        assert all(i["verdict"] == "accepted" for i in data["items"]), res.stdout.str()[-5000:]
    first, second = runs
    for names in CUDA_CANDIDATES.values():
        for name in names:
            b1, b2 = first[name]["details"]["build"], second[name]["details"]["build"]
            assert (b1["built_by"], b2["built_by"]) == ("pool", "cache") and b1["key"] == b2["key"], (b1, b2)
            assert "build" in first[name]["details"]["wire"] and "build" not in second[name]["details"]["wire"]
            assert ("triton" in b1["compiler"]) == (name == "softmax_triton"), b1["compiler"]
