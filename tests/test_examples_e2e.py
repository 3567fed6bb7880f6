"""The guide's example candidates (examples/, included verbatim in docs/guide/candidates.md and
docs/guide/compiled-candidates.md) go through the gates end to end: the PyTorch candidate and the C++ one on the CPU
in one recording session (correctness, probes, build, paired timing, integrity, store), the CUDA one with
``--device=cuda`` where a GPU is present. What is measured is the repository's own bytes: each item's provenance
names the sha256 of the file in examples/. The CPU session runs at half the protocol's timing budget
(PYTEST_AUTOTUNE_BUDGET_SCALE=0.5), and its run's provenance must say so."""

from __future__ import annotations

import ast
import hashlib
import json
import re
import shutil
import sqlite3
from types import SimpleNamespace

import jsonschema
import pytest
import torch

from conftest import REPO, ModuleRequest, fast_protocol_text

EXAMPLES = REPO / "examples"
PROBLEM = EXAMPLES / "leaky_relu.py"
CANDIDATES = EXAMPLES / "candidates" / "leaky_relu"
TORCH_CANDIDATE = CANDIDATES / "leaky_relu_torch.py"
CPP_CANDIDATE = CANDIDATES / "cpu" / "leaky_relu_cpp.py"
CUDA_CANDIDATE = CANDIDATES / "cuda" / "leaky_relu_cuda.py"
SCHEMA = json.loads((REPO / "pytest_autotune" / "report" / "report.schema.json").read_text())


def _sha256(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _copy_examples(root) -> None:
    """examples/ as it is in the repository, byte for byte, with the test suite's fast protocol beside it."""
    shutil.copytree(EXAMPLES, root / "examples", ignore=shutil.ignore_patterns("__pycache__"))
    (root / "protocol.toml").write_text(fast_protocol_text())


def _session(pt: pytest.Pytester, *args: str) -> tuple[pytest.RunResult, dict]:
    res = pt.runpytest_subprocess("--autotune", "--autotune-exploratory", "--problems=examples", "examples",
                                  "--autotune-json=report.json", "-p", "no:cacheprovider", *args, timeout=1200)
    report = pt.path / "report.json"
    data = json.loads(report.read_text()) if report.exists() else {"items": []}
    if data["items"]:
        jsonschema.validate(data, SCHEMA)
    return res, {i["candidate"]: i for i in data["items"]}


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest):
    mp = pytest.MonkeyPatch()
    try:
        pt = pytest.Pytester(ModuleRequest(request), tmp_path_factory, mp, _ispytest=True)  # type: ignore[arg-type]
        mp.setenv("PYTEST_AUTOTUNE_BUDGET_SCALE", "0.5")
        _copy_examples(pt.path)
        res, items = _session(pt)
        yield SimpleNamespace(root=pt.path, res=res, items=items, out=res.stdout.str())
    finally:
        mp.undo()


def test_the_pytorch_example_passes_every_gate_on_the_cpu(cpu_run) -> None:
    it = cpu_run.items.get("leaky_relu_torch")
    assert it is not None, cpu_run.out[-3000:]
    assert it["verdict"] == "accepted", it["reason"] + cpu_run.out[-3000:]
    assert it["speedup"] > 0 and it["ci"][0] <= it["speedup"] <= it["ci"][1] and it["n_pairs"] >= 1
    assert "build" not in it["details"]  # a plain PyTorch candidate has no build stage


def test_the_cpp_example_builds_once_and_passes_every_gate_on_the_cpu(cpu_run) -> None:
    it = cpu_run.items.get("leaky_relu_cpp")
    assert it is not None, cpu_run.out[-3000:]
    assert it["verdict"] == "accepted", it["reason"] + cpu_run.out[-3000:]
    build = it["details"]["build"]
    # built once in this session: by the item's build stage, or by the session's build pool before the first item
    # (then the item reads the pool's entry: build/prebuild.py)
    assert (build["cache"] == "miss" or build.get("built_by") == "pool") and build["built"] == ["example_leaky_relu_f32"], build
    assert it["speedup"] > 0 and it["n_pairs"] >= 1


def test_what_was_measured_is_the_repositorys_files(cpu_run) -> None:
    """The session measured examples/ as committed, not a copy that drifted from it."""
    assert cpu_run.items, cpu_run.out[-3000:]
    digests = {name: _sha256(path) for name, path in (("leaky_relu_torch", TORCH_CANDIDATE),
                                                       ("leaky_relu_cpp", CPP_CANDIDATE))}
    with sqlite3.connect(cpu_run.root / ".autotune" / "results.db") as conn:
        rows = dict(conn.execute("SELECT candidate, provenance FROM results").fetchall())
    for name, sha in digests.items():
        prov = json.loads(rows[name])
        assert prov["candidate_sha256"] == sha and prov["problem_sha256"] == _sha256(PROBLEM), (name, prov)


def test_the_run_records_the_budget_scale_it_ran_under(cpu_run) -> None:
    with sqlite3.connect(cpu_run.root / ".autotune" / "results.db") as conn:
        (stored,) = conn.execute("SELECT provenance FROM runs").fetchone()
    report = json.loads((cpu_run.root / "report.json").read_text())["run"]["provenance"]
    for prov in (json.loads(stored), report):
        assert prov["budget_scale"] == 0.5
        assert prov["environment"]["PYTEST_AUTOTUNE_BUDGET_SCALE"] == "0.5"


# ------------------------------------------------------------------------------------------ the CUDA example


def _cuda_source() -> tuple[ast.Module, str]:
    text = CUDA_CANDIDATE.read_text()
    tree = ast.parse(text, filename=str(CUDA_CANDIDATE))
    sources = {t.id: node.value.value for node in tree.body if isinstance(node, ast.Assign)
               for t in node.targets if isinstance(t, ast.Name)
               if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)}
    return tree, sources.get("CUDA_SOURCE", "")


def test_the_cuda_example_is_a_whole_load_inline_candidate() -> None:
    """Without a GPU: the file parses as Python, calls load_inline with cuda_sources holding a __global__ kernel,
    launches it with a grid and a block on the current stream after x.contiguous(), checks its input and the launch,
    and defines ModelNew with the problem's constructor."""
    tree, cuda = _cuda_source()
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "load_inline"]
    assert len(calls) == 1 and {k.arg for k in calls[0].keywords} >= {"cpp_sources", "cuda_sources", "functions"}
    assert re.search(r"__global__\s+void\s+\w+\s*\(", cuda), "a __global__ kernel in cuda_sources"
    assert re.search(r"<<<\s*[^,>]+,\s*[^,>]+,\s*0,\s*c10::cuda::getCurrentCUDAStream\(\)\s*>>>", cuda), \
        "a launch with a grid and a block on the current stream"
    assert cuda.index("x.contiguous()") < cuda.index("data_ptr"), "x.contiguous() before data_ptr"
    assert "TORCH_CHECK(x.is_cuda()" in cuda and "C10_CUDA_KERNEL_LAUNCH_CHECK()" in cuda
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    assert "ModelNew" in classes
    init = next(f for f in classes["ModelNew"].body if isinstance(f, ast.FunctionDef) and f.name == "__init__")
    problem = ast.parse(PROBLEM.read_text())
    model = next(n for n in problem.body if isinstance(n, ast.ClassDef) and n.name == "Model")
    model_init = next(f for f in model.body if isinstance(f, ast.FunctionDef) and f.name == "__init__")
    assert ast.dump(init.args) == ast.dump(model_init.args), "ModelNew takes Model's constructor arguments"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="the CUDA example needs a CUDA device")
def test_the_cuda_example_builds_and_passes_every_gate_on_a_gpu(pytester: pytest.Pytester) -> None:
    _copy_examples(pytester.path)
    res, items = _session(pytester, "--device=cuda")
    out = res.stdout.str()
    it = items.get("leaky_relu_cuda")
    assert it is not None, out[-5000:]
    assert it["verdict"] == "accepted", it["reason"] + out[-5000:]
    assert it["details"]["build"]["built"] == ["example_leaky_relu_cuda"]
    assert items["leaky_relu_torch"]["verdict"] == "accepted", out[-5000:]
    assert "leaky_relu_cpp" not in items  # cpu/ candidates are collected on the CPU alone
