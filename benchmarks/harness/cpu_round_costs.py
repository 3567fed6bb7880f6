"""What a CPU timing round's own work costs, outside the harness, on one thread (docs/design/protocol.md#derived-input-sets):

    python3 benchmarks/harness/cpu_round_costs.py

* building a round's two input groups (``inputs.materialize_groups``): every set drawn by ``get_inputs()``, against
  derived from one draw a round (protocol 8), for a few problems at their CPU sizes and a typical k;
* the fingerprint's float64 sums of a 0.5M-float output (``tree.float64_sums``), against the ``vector_norm(1)``
  form the CPU used before protocol 8.

Medians of repeated runs, with the sandboxes' malloc settings; each in a fresh process pinned to one CPU.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from pytest_autotune.sandbox.jail_session import MALLOC_REUSE_ENV

REPO = Path(__file__).resolve().parents[2]
ENV = {**os.environ, **MALLOC_REUSE_ENV}  # the sandboxes' malloc settings
CASES = (("benchmarks/kernels/level1/01_scaled_add.py", 3), ("benchmarks/kernels/level1/07_layer_norm.py", 3),
         ("benchmarks/harness/short_calls/kb19_relu.py", 30))

GROUPS = r"""
import sys, time, torch
torch.set_num_threads(1)
from pathlib import Path
from pytest_autotune.problems.inputs import materialize_groups
from pytest_autotune.problems.loader import LoadedProblem
from pytest_autotune.problems.model import SourceFile
p = LoadedProblem.load(SourceFile.read(Path(sys.argv[1])))
k, sizes = int(sys.argv[2]), p.sizes_for("cpu")
for mode in ("drawn", "derived"):
    ts = []
    for r in range(12):
        extra = {"derive": 0.0625, "base": r * 10} if mode == "derived" else {}
        rs = {g: {"seed": r * 10 + i, "count": k, "sizes": sizes, **extra} for i, g in enumerate(("p1", "p2"))}
        t0 = time.perf_counter(); b = materialize_groups(p, rs); ts.append(time.perf_counter() - t0); del b
    print(f"| {Path(sys.argv[1]).stem} | {k} | {mode} | {sorted(ts)[6] * 1e3:.1f} |")
"""

SUMS = r"""
import time, torch
torch.set_num_threads(1)
from pytest_autotune.tree import float64_sums
x = torch.randn(128 * 4096)
def old(flat):  # the CPU's sums before protocol 8: one vector_norm(1) over all rows
    body = flat.reshape(-1, 4096)
    return (body.sum(dim=1, dtype=torch.float32).sum(dtype=torch.float64),
            torch.linalg.vector_norm(body, 1, dim=1, dtype=torch.float32).sum(dtype=torch.float64))
for name, f in (("vector_norm(1) (protocols 1-7)", old), ("float64_sums (protocol 8)", lambda v: float64_sums(v, 1 << 22))):
    f(x); ts = []
    for _ in range(50):
        t0 = time.perf_counter(); f(x); ts.append(time.perf_counter() - t0)
    print(f"| {name} | {sorted(ts)[25] * 1e3:.3f} |")
"""


def _run(code: str, *args: str) -> str:
    cpu = str(max(os.sched_getaffinity(0))) if hasattr(os, "sched_getaffinity") else "0"
    return subprocess.run(["taskset", "-c", cpu, sys.executable, "-c", code, *args], env=ENV, cwd=REPO,
                          capture_output=True, text=True, check=True).stdout.strip()


def main() -> None:
    print("| problem | k | sets | a round's two groups (ms) |\n|---|---|---|---|")
    for path, k in CASES:
        print(_run(GROUPS, path, str(k)))
    print("\n| sums of a 0.5M-float output, sum and sum of abs | ms |\n|---|---|")
    print(_run(SUMS))


if __name__ == "__main__":
    main()
