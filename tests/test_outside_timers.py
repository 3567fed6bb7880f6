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


def test_the_leaderboard_table_voids_a_do_bench_row_that_timed_another_candidates_module(tmp_path):
    """leaderboard_table.py: in a do_bench file timed in one process, the second candidate whose extension shares a
    module name with an earlier one is void (its time was the first one's); each row carries its run, and a speedup
    is never set beside another run's do_bench."""
    import json
    import subprocess

    def item(name: str, ext: str, speedup: float) -> dict:
        return {"nodeid": f"p.py::{name}[cuda]", "candidate": name, "problem": "42_Max_Pooling_2D",
                "verdict": "accepted", "speedup": speedup, "ci": [speedup * 0.99, speedup * 1.01],
                "details": {"build": {"built": [ext]}}}

    published = {"candidates": [{"name": n, "problem": "42_Max_Pooling_2D", "model": "m",
                                 "published": {"speedup": 1.0, "hardware": "L40S"}} for n in ("a", "b", "c")]}
    (tmp_path / "published.json").write_text(json.dumps(published))
    (tmp_path / "run1.jsonl").write_text("\n".join(json.dumps(i) for i in (
        item("a", "maxpool2d", 1.07), item("b", "maxpool2d", 0.32), item("c", "max_pool2d_cuda", 1.25))))
    (tmp_path / "old.jsonl").write_text(json.dumps(item("c", "max_pool2d_cuda", 1.10)))
    rows = [{"candidate": n, "dobench": d} for n, d in (("a", 1.03), ("b", 1.03), ("c", 1.18))]
    (tmp_path / "db1.json").write_text(json.dumps({"rows": rows}))
    (tmp_path / "db0.json").write_text(json.dumps({"rows": [{"candidate": "c", "dobench": 9.9}]}))
    script = REPO / "benchmarks" / "harness" / "gpu" / "leaderboard_table.py"
    proc = subprocess.run(
        [sys.executable, str(script), "--published", str(tmp_path / "published.json"),
         "--items", str(tmp_path / "old.jsonl"), str(tmp_path / "run1.jsonl"), "--labels", "old", "new",
         "--dobench", str(tmp_path / "db1.json"), str(tmp_path / "db0.json"), "--dobench-labels", "new", "old",
         "--json", str(tmp_path / "table.json"), "--md", str(tmp_path / "table.md")],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    table = {r["candidate"]: r for r in json.loads((tmp_path / "table.json").read_text())["rows"]}
    assert table["a"]["dobench"] == 1.03 and not table["a"]["dobench_void"]
    assert table["b"]["dobench"] is None and "a's extension (maxpool2d)" in table["b"]["dobench_void"]
    # c: its latest item is run "new"; the later do_bench file is run "old" and is not this speedup's
    assert table["c"]["run"] == "new" and table["c"]["dobench"] == 1.18
    assert "void (another candidate's module of the same name)" in (tmp_path / "table.md").read_text()
