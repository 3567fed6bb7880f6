"""N compiled candidates built one after another and in the build pool (docs/results/cpu-2026-12-06.md, "Builds in
parallel").

    python3 benchmarks/harness/build_pool.py --n 8 --modes 0,1,auto --out docs/data/build-<date>/pool.json

Writes a suite of one problem (KernelBench's ReLU shape) and ``--n`` candidates, each a realistic C++ extension
(``#include <torch/extension.h>``, ``functions=[...]``: pybind11 bindings, the form agents write), different in one
comment so that each has a build key of its own. For each mode it runs one pytest session over the suite with a
store (and a build cache) of its own, without ``--autotune`` (correctness only: the builds are what is measured):

* ``0``: ``--autotune-build-workers=0``, no pool: each item builds its own in its flow, one after another (ninja's
  default parallelism) -- the plugin before the pool;
* ``1``: the pool one build at a time, ``MAX_JOBS`` = the cores;
* ``auto``: the pool as wide as the cores and the memory allow.

Per mode: the session's wall time, the pool's (from its first build's start to its last build's end, read from the
items' ``details.build.pool``), the sum of the items' build stages, each build's own seconds and who built it, and
the CPU time of the session with everything it started (``RUSAGE_CHILDREN``: the compilers included).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PROBLEM = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)


batch_size = 16
dim = 16384


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
'''
CANDIDATE = '''"""A C++ ReLU through load_inline with torch's headers and pybind11 bindings (copy {i})."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

SOURCE = r"""
// copy {i}
#include <torch/extension.h>
torch::Tensor relu_forward(torch::Tensor x) {{
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    const float* a = xc.data_ptr<float>();
    float* b = y.data_ptr<float>();
    for (int64_t i = 0; i < xc.numel(); ++i) b[i] = a[i] < 0.0f ? 0.0f : a[i];
    return y;
}}
"""
_ext = load_inline("bench_relu_{i}", cpp_sources=SOURCE, functions=["relu_forward"], extra_cflags=["-O3"])


class ModelNew(nn.Module):
    def forward(self, x):
        return _ext.relu_forward(x)
'''


def write_suite(root: Path, n: int) -> Path:
    suite = root / "suite"
    (suite / "candidates" / "relu").mkdir(parents=True)
    (suite / "relu.py").write_text(PROBLEM)
    for i in range(n):
        (suite / "candidates" / "relu" / f"ext_{i:02d}.py").write_text(CANDIDATE.format(i=i))
    return suite


def session(root: Path, suite: Path, mode: str) -> dict:
    folder = root / f"mode-{mode}"
    folder.mkdir()
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", f"--problems={suite}",
           f"--autotune-db={folder}/results.db", f"--autotune-json={folder}/report.json", f"--rootdir={root}"]
    if mode != "auto":
        cmd.append(f"--autotune-build-workers={mode}")
    load0 = os.getloadavg()
    r0, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    out = subprocess.run(cmd, cwd=root, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    report = json.loads((folder / "report.json").read_text())
    return {**summarize(mode, out.returncode, wall, r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime, report,
                        out.stdout), "loadavg_before": load0, "loadavg_after": os.getloadavg()}


def summarize(mode: str, code: int, wall: float, cpu: float, report: dict, stdout: str) -> dict:
    """One session's numbers; ``pool_span_s``: from the pool's first build's start to its last build's end (the
    items' ``details.build.pool``), the same whether or not the terminal line was printed (``-q`` hides it)."""
    pool = re.search(r"build pool done in ([0-9.]+) s", stdout)
    builds = [i["details"]["build"] for i in report["items"]]
    pools = [b["pool"] for b in builds if b.get("pool")]
    items = [{"candidate": i["candidate"], "verdict": i["verdict"], "built_by": b.get("built_by"),
              "stage_s": b.get("seconds"), "build_s": b.get("build_seconds"),
              "pool_build_s": (b.get("pool") or {}).get("seconds")} for i, b in zip(report["items"], builds)]
    return {"mode": mode, "exit": code, "session_wall_s": round(wall, 1), "cpu_s": round(cpu, 1),
            "pool_s": float(pool.group(1)) if pool else None,
            "pool_span_s": round(max(p["queued_s"] + p["seconds"] for p in pools), 1) if pools else None,
            "width": pools[0]["width"] if pools else None, "max_jobs": pools[0]["jobs"] if pools else None,
            "items_build_stage_s": round(sum(i["stage_s"] or 0 for i in items), 1),
            "accepted": sum(i["verdict"] == "accepted" for i in items), "items": items,
            "tail": stdout.splitlines()[-3:]}


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--modes", default="0,1,auto")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="autotune-build-pool-"))
    repo = Path(__file__).resolve().parents[2]
    (root / "protocol.toml").write_text((repo / "protocol.toml").read_text())
    suite = write_suite(root, args.n)
    result = {"n": args.n, "cores": len(os.sched_getaffinity(0)), "loadavg_before": os.getloadavg(), "modes": []}
    for mode in args.modes.split(","):
        r = session(root, suite, mode)
        result["modes"].append(r)
        print(f"mode {mode}: session {r['session_wall_s']} s, pool {r['pool_span_s']} s (width {r['width']}, "
              f"MAX_JOBS {r['max_jobs']}), items' build stages {r['items_build_stage_s']} s, CPU {r['cpu_s']} s, "
              f"{r['accepted']}/{args.n} accepted", flush=True)
    result["loadavg_after"] = os.getloadavg()
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
