"""``autotune import kernelbench`` (docs/reference/cli.md): KernelBench-format solutions from the leaderboard's layout
and from a KernelBench run's folder become problems and candidates the plugin runs, each item carrying the numbers
published for its candidate (``details.published``). The sources are small synthetic folders in both layouts,
written here: no file of the leaderboard or of KernelBench is in the repository."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import e2e_files as F
import jsonschema
import pytest

from conftest import REPO
from pytest_autotune.cli import main

SCHEMA = json.loads((REPO / "pytest_autotune" / "report" / "report.schema.json").read_text())
SCALE = F.RELU.replace("torch.relu(x)", "x * 2.0")
TORCH_SOLUTION = '''"""An agent's answer in plain PyTorch ({tag})."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return {expr}
'''
CUDA_SOLUTION = '''"""An agent's answer in CUDA C++ (never built here: it is only copied)."""
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_ext = load_inline("relu_cuda", cpp_sources="torch::Tensor relu(torch::Tensor x);",
                   cuda_sources="__global__ void k() {}", functions=["relu"])


class ModelNew(nn.Module):
    def forward(self, x):
        return _ext.relu(x)
'''
HASHES = {"relu_a": "a1" * 16, "relu_b": "b2" * 16, "relu_cuda": "c3" * 16, "scale": "d4" * 16, "l2": "e5" * 16}


def leaderboard(root: Path) -> Path:
    """The leaderboard repository's layout: problems, solutions, data.json, raw_data.json, the page."""
    assets = root / "docs" / "assets"
    (assets / "problems").mkdir(parents=True)
    (assets / "solutions").mkdir()
    (assets / "problems" / "l1_p19.py").write_text(F.RELU)
    (assets / "problems" / "l1_p7.py").write_text(SCALE)
    (assets / "problems" / "l2_p19.py").write_text(F.RELU)
    sols = {"relu_a": TORCH_SOLUTION.format(tag="a", expr="torch.relu(x)"),
            "relu_b": TORCH_SOLUTION.format(tag="b", expr="x.clamp_min(0.0)"),
            "relu_cuda": CUDA_SOLUTION, "scale": TORCH_SOLUTION.format(tag="s", expr="x + x"),
            "l2": TORCH_SOLUTION.format(tag="l2", expr="torch.relu(x)")}
    for key, text in sols.items():
        (assets / "solutions" / f"{HASHES[key]}.py").write_text(text)
    data = {"Level 1: 19_ReLU": [{"display_name": "claude-3.5-sonnet", "torch_speedup": 1.25, "file": HASHES["relu_a"]},
                                 {"display_name": "gpt-4o", "torch_speedup": 0.8, "file": HASHES["relu_cuda"]},
                                 {"display_name": "gpt-4o", "torch_speedup": 0.5, "file": "f" * 32}],  # no file
            "Level 1: 7_Scale": [{"display_name": "deepseek-coder", "torch_speedup": 2.0, "file": HASHES["scale"]}],
            "Level 2: 19_ReLU_Fused": [{"display_name": "gpt-o1", "torch_speedup": 3.0, "file": HASHES["l2"]}]}
    # raw_data.json numbers problems from 0 (the public leaderboard's "problem_id": 18 is "Level 1: 19_ReLU")
    raw = [{"problem_id": 18, "code": "...", "torch_speedup": 1.25, "torch_compile_speedup": 0.9,
            "baseline_torch_time": 0.02, "baseline_torch_compile_time": 0.03, "kernel_eval_time": 0.016, "level": 1,
            "model": "claude-3-5-sonnet-20241022", "display_name": "claude-3.5-sonnet", "file": HASHES["relu_a"]},
           {"problem_id": 18, "code": "...", "torch_speedup": 0.6, "torch_compile_speedup": 0.5,
            "baseline_torch_time": 0.02, "baseline_torch_compile_time": 0.03, "kernel_eval_time": 0.033, "level": 1,
            "model": "deepseek", "display_name": "deepseek-coder", "file": HASHES["relu_b"]},
           {"problem_id": 18, "code": "...", "torch_speedup": 3.0, "level": 2, "model": "o1", "display_name": "gpt-o1",
            "file": HASHES["l2"]}]
    (assets / "data.json").write_text(json.dumps(data))
    (assets / "raw_data.json").write_text(json.dumps(raw))
    (root / "docs" / "index.html").write_text("<html><head><title>Top Solutions (Nvidia L40S GPU)</title></head></html>")
    return root


def kernelbench_run(root: Path) -> tuple[Path, Path, Path]:
    """A KernelBench checkout's problems and baseline times, and a run folder of generated kernels."""
    kb = root / "KernelBench-checkout"
    (kb / "KernelBench" / "level1").mkdir(parents=True)
    (kb / "KernelBench" / "level1" / "19_ReLU.py").write_text(F.RELU)
    (kb / "KernelBench" / "level1" / "7_Scale.py").write_text(SCALE)
    times = kb / "results" / "timing" / "L40S_test" / "baseline_time_torch.json"
    times.parent.mkdir(parents=True)
    times.write_text(json.dumps({"level1": {"19_ReLU.py": {"mean": 0.03, "hardware": "NVIDIA L40S"},
                                            "7_Scale.py": {"mean": 0.02, "hardware": "NVIDIA L40S"}}}))
    run = root / "runs" / "test_run_1"
    run.mkdir(parents=True)
    (run / "generation_config.yaml").write_text("level: 1\nrun_name: test_run_1\nmodel_name: deepseek-chat\n")
    (run / "level_1_problem_19_sample_0_kernel.py").write_text(TORCH_SOLUTION.format(tag="s0", expr="torch.relu(x)"))
    (run / "level_1_problem_19_sample_1_kernel.py").write_text(TORCH_SOLUTION.format(tag="s1", expr="x"))
    (run / "level_1_problem_7_sample_0_kernel.py").write_text(TORCH_SOLUTION.format(tag="s", expr="2.0 * x"))
    evals = {"19": [{"sample_id": 0, "compiled": True, "correctness": True, "runtime": 0.015,
                     "metadata": {"hardware": "NVIDIA L40S", "device": "cuda:0"}},
                    {"sample_id": 1, "compiled": True, "correctness": False, "runtime": -1.0, "metadata": {}}],
             "7": [{"sample_id": 0, "compiled": True, "correctness": True, "runtime": 0.04,
                    "metadata": {"hardware": "NVIDIA L40S"}}]}
    (run / "eval_results.json").write_text(json.dumps(evals))
    return run, kb, times


def _manifest(out: Path) -> dict:
    return json.loads((out / "published.json").read_text())


def test_the_leaderboard_becomes_problems_and_candidates_with_their_published_numbers(tmp_path: Path, capsys) -> None:
    src, out = leaderboard(tmp_path / "lb"), tmp_path / "suite"
    assert main(["import", "kernelbench", str(src), "--out", str(out)]) == 0
    assert (out / "problems" / "19_ReLU.py").read_bytes() == (src / "docs/assets/problems/l1_p19.py").read_bytes()
    assert sorted(p.name for p in (out / "problems").iterdir()) == ["19_ReLU.py", "7_Scale.py"]  # level 1 only
    m = _manifest(out)
    by = {c["name"]: c for c in m["candidates"]}
    a = by[f"lb_claude35sonnet_{HASHES['relu_a'][:8]}"]
    assert a["file"] == f"candidates/19_ReLU/lb_claude35sonnet_{HASHES['relu_a'][:8]}.py"
    assert a["published"] == {"speedup": 1.25, "speedup_vs_torch_compile": 0.9, "hardware": "L40S",
                              "source": "KernelBench leaderboard", "baseline_ms": 0.02, "baseline_compile_ms": 0.03,
                              "kernel_ms": 0.016, "model_id": "claude-3-5-sonnet-20241022", "correct": True}
    assert a["model"] == "claude-3.5-sonnet" and a["source_id"] == HASHES["relu_a"]
    assert a["source_path"].endswith(f"docs/assets/solutions/{HASHES['relu_a']}.py")
    for c in m["candidates"]:  # every solution unchanged, its digest in the manifest
        data = (out / c["file"]).read_bytes()
        assert hashlib.sha256(data).hexdigest() == c["sha256"] == hashlib.sha256(
            Path(c["source_path"]).read_bytes()).hexdigest()
    cuda = by[f"lb_gpt4o_{HASHES['relu_cuda'][:8]}"]
    assert cuda["file"].startswith("candidates/19_ReLU/cuda/")  # names CUDA: collected with --device=cuda only
    assert set(by) == {f"lb_claude35sonnet_{HASHES['relu_a'][:8]}", f"lb_deepseekcoder_{HASHES['relu_b'][:8]}",
                       f"lb_gpt4o_{HASHES['relu_cuda'][:8]}", f"lb_deepseekcoder_{HASHES['scale'][:8]}"}
    assert m["sample"] is None and m["source"]["layout"] == "leaderboard"
    assert "--device=cuda" in capsys.readouterr().out
    assert main(["import", "kernelbench", str(src), "--out", str(out)]) == 2  # an import is never overwritten
    assert "--force" in capsys.readouterr().err


def test_a_sample_is_drawn_by_its_seed_and_printed(tmp_path: Path, capsys) -> None:
    src = leaderboard(tmp_path / "lb")
    draws = []
    for i, seed in enumerate(("11", "11")):
        out = tmp_path / f"s{i}"
        assert main(["import", "kernelbench", str(src), "--out", str(out), "--sample", "2", "--seed", seed]) == 0
        printed = capsys.readouterr().out
        m = _manifest(out)
        assert m["sample"]["seed"] == 11 and m["sample"]["n"] == 2 and m["sample"]["of"] == 4
        assert "seed 11" in printed and all(name in printed for name in m["sample"]["drawn"])
        assert sorted(c["name"] for c in m["candidates"]) == sorted(m["sample"]["drawn"])
        draws.append(m["sample"]["drawn"])
    assert draws[0] == draws[1] and len(draws[0]) == 2
    assert main(["import", "kernelbench", str(src), "--out", str(tmp_path / "s2"), "--sample", "3"]) == 0
    assert isinstance(_manifest(tmp_path / "s2")["sample"]["seed"], int)  # a fresh seed, kept and printed
    assert f"seed {_manifest(tmp_path / 's2')['sample']['seed']}" in capsys.readouterr().out


def test_a_kernelbench_run_becomes_candidates_with_its_speedups(tmp_path: Path) -> None:
    run, kb, times = kernelbench_run(tmp_path)
    out = tmp_path / "suite"
    assert main(["import", "kernelbench", str(run), "--out", str(out), "--kernelbench", str(kb),
                 "--baseline-times", str(times)]) == 0
    by = {(c["problem"], c["name"]): c for c in _manifest(out)["candidates"]}
    assert sorted(by) == [("19_ReLU", "kb_deepseekchat_testrun1_s0"), ("19_ReLU", "kb_deepseekchat_testrun1_s1"),
                          ("7_Scale", "kb_deepseekchat_testrun1_s0")]
    s0 = next(c for c in by.values() if c["problem"] == "19_ReLU" and c["source_id"].endswith("p19_s0"))
    assert s0["published"]["speedup"] == pytest.approx(0.03 / 0.015) and s0["published"]["hardware"] == "NVIDIA L40S"
    assert s0["published"]["correct"] is True and s0["model"] == "deepseek-chat"
    s1 = next(c for c in by.values() if c["source_id"].endswith("p19_s1"))
    assert "speedup" not in s1["published"] and s1["published"]["correct"] is False  # KernelBench refused it
    scale = next(c for c in by.values() if c["problem"] == "7_Scale")
    assert scale["published"]["speedup"] == pytest.approx(0.02 / 0.04)
    assert (out / "problems" / "19_ReLU.py").read_text() == F.RELU
    assert main(["import", "kernelbench", str(run), "--out", str(tmp_path / "no-kb")]) == 2  # its problems are needed


def test_a_folder_in_neither_layout_is_refused_by_name(tmp_path: Path, capsys) -> None:
    assert main(["import", "kernelbench", str(tmp_path), "--out", str(tmp_path / "x")]) == 2
    assert "neither KernelBench leaderboard" in capsys.readouterr().err


def test_each_item_carries_its_candidates_published_numbers(tmp_path: Path, pytester: pytest.Pytester) -> None:
    src, out = leaderboard(tmp_path / "lb"), pytester.path / "suite"
    assert main(["import", "kernelbench", str(src), "--out", str(out)]) == 0
    res = pytester.runpytest_subprocess(f"--problems={out / 'problems'}", f"--candidates={out / 'candidates'}",
                                        "--autotune-json=r.json", "-p", "no:cacheprovider", timeout=600)
    report = json.loads((pytester.path / "r.json").read_text())
    jsonschema.validate(report, SCHEMA)
    items = {i["candidate"]: i for i in report["items"]}
    a = items[f"lb_claude35sonnet_{HASHES['relu_a'][:8]}"]
    assert a["verdict"] == "accepted", res.stdout.str()[-3000:]
    pub = a["details"]["published"]
    assert (pub["speedup"], pub["hardware"], pub["source"], pub["model"]) == (
        1.25, "L40S", "KernelBench leaderboard", "claude-3.5-sonnet")
    assert f"lb_gpt4o_{HASHES['relu_cuda'][:8]}" not in items  # CUDA only: not collected on the CPU
    assert all("published" in i["details"] for i in items.values())
    # the manifest named explicitly, for candidates whose folder has none beside it
    moved = pytester.path / "elsewhere.json"
    (out / "published.json").rename(moved)
    res = pytester.runpytest_subprocess(f"--problems={out / 'problems'}", f"--candidates={out / 'candidates'}",
                                        f"--autotune-published={moved}", "--autotune-json=r2.json",
                                        "-p", "no:cacheprovider", "-k", "lb_claude35sonnet", timeout=600)
    items = {i["candidate"]: i for i in json.loads((pytester.path / "r2.json").read_text())["items"]}
    assert items[f"lb_claude35sonnet_{HASHES['relu_a'][:8]}"]["details"]["published"]["speedup"] == 1.25
    bad = pytester.runpytest_subprocess(f"--problems={out / 'problems'}", f"--autotune-published={out / 'problems'}",
                                        "-p", "no:cacheprovider", timeout=600)
    assert bad.ret == pytest.ExitCode.USAGE_ERROR and "not a manifest of published numbers" in bad.stderr.str()
