"""benchmarks/harness/gpu/outside_timers.py: do_bench's pairs go to processes where no two candidates' compiled
extensions share a module name (Python keeps one extension module per name in a process: a second
``load_inline(name="maxpool2d")`` returns the first candidate's module, and do_bench timed the first candidate's
kernel under the second's name on an H100, 2026-12-06)."""

from __future__ import annotations

import importlib.util
import sys

from conftest import REPO


def _outside_timers():
    path = REPO / "benchmarks" / "harness" / "gpu" / "outside_timers.py"
    spec = importlib.util.spec_from_file_location("outside_timers_under_test", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _item(name: str, *built: str) -> dict:
    return {"nodeid": f"p.py::{name}[cuda]", "candidate": name,
            "details": {"build": {"built": list(built)}} if built else {}}


def test_candidates_whose_extensions_share_a_name_are_timed_in_processes_of_their_own():
    ot = _outside_timers()
    items = [_item("claude", "maxpool2d"), _item("deepseek", "maxpool2d"), _item("gpto1", "max_pool2d_cuda"),
             _item("llama", "maxpool2d"), _item("torch_only"), _item("two", "mean_reduction", "maxpool2d")]
    groups = [[it["candidate"] for it in g] for g in ot.processes_for(items)]
    assert groups == [["claude", "gpto1", "torch_only"], ["deepseek"], ["llama"], ["two"]]
    for g in ot.processes_for(items):  # no name twice in a process
        names = [n for it in g for n in ot._extension_names(it)]
        assert len(names) == len(set(names))
    assert [[it["candidate"] for it in g] for g in ot.processes_for(items[2:3] + items[4:5])] == [
        ["gpto1", "torch_only"]]  # distinct names: one process, as before


def test_the_processes_time_every_pair_and_their_rows_come_back_in_order(tmp_path):
    """The split end to end on the CPU (its host-clock fallback): two bundled pairs whose builds claim one module
    name go to two processes of the script, and both rows come back, each saying which process timed it."""
    import json
    import subprocess

    items = []
    for problem, cand in (("01_scaled_add", "add_alpha"), ("04_silu", "fused_silu")):
        it = _item(cand, "same_name")
        it.update(nodeid=f"benchmarks/kernels/level1/{problem}.py::{cand}[cpu]", problem=problem,
                  verdict="accepted", speedup=1.0, ci=[0.9, 1.1], baseline="reference")
        items.append(it)
    report, out = tmp_path / "report.json", tmp_path / "dobench.json"
    report.write_text(json.dumps({"items": items}))
    script = REPO / "benchmarks" / "harness" / "gpu" / "outside_timers.py"
    proc = subprocess.run([sys.executable, str(script), "dobench", "--report", str(report), "--out", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(out.read_text())
    assert result["processes"] == 2
    assert [(r["candidate"], r["process"]) for r in result["rows"]] == [("add_alpha", 0), ("fused_silu", 1)], result
    assert all("error" not in r and r["dobench"] > 0 for r in result["rows"]), result["rows"]
