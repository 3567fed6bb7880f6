"""Why a CPU sample's calls cost more with many input sets alive: page faults, the heap's size, trims and the
last-level cache, per call, at several ``k`` (docs/results/cpu.md, "The sample's shape").

    python benchmarks/harness/cpu_sample_regime.py                       # 02_relu's reference and torch.relu
    python benchmarks/harness/cpu_sample_regime.py --k 4 16 64 --rounds 12 --out regime.json

Each configuration runs in a fresh process pinned to one CPU, with the sandboxes' malloc settings of one protocol
(``reuse``: protocol 8, the heap trimmed past 1 GiB free; ``steady``: protocol 9, never trimmed) and with or without
the last-level-cache flush once a round's inputs are built. A round does what a sandbox's round does for one arm:
fresh placements (measure/devices/placement.py), two groups of k derived inputs of 02_relu's CPU size (256 x 4096
floats), then the arm's two samples -- an L2 flush, k calls -- with every output kept until the round is released.
Reported per configuration, over the rounds after the first two: the median time per call (wall, and the thread's
CPU time, which preemption does not inflate), page faults per sample, the heap's size (mallinfo2 arena) and how
many rounds ended with a smaller heap than they began (trims).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

CHILD = r"""
import json, os, resource, statistics, sys, time
import torch
sys.path.insert(0, os.environ["REPO"])
from pytest_autotune.measure.devices.cpu import last_level_cache_bytes, per_core_l2_bytes
from pytest_autotune.measure.devices.placement import Placement, _mallinfo2

torch.set_num_threads(1)
arm, k, rounds, llc = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
fn = {"reference": lambda x: torch.maximum(x, torch.zeros_like(x)), "relu": torch.relu}[arm]
info = _mallinfo2()
faults = lambda: sum(getattr(resource.getrusage(resource.RUSAGE_SELF), f) for f in ("ru_minflt", "ru_majflt"))
placement = Placement(1 << 20)
l2 = torch.empty(2 * per_core_l2_bytes() // 4, dtype=torch.int32)
big = torch.empty(2 * last_level_cache_bytes() // 4, dtype=torch.int32) if llc else None
draw = torch.randn(256, 4096)
wall, cpu, flt, arenas, trims = [], [], [], [], 0
for r in range(rounds):
    placement.before_inputs(r)
    before = info().arena
    groups = [[draw * (1 - 0.0625 * torch.rand(256, 1)) * (1 - 0.0625 * torch.rand(1, 4096)) for _ in range(k)]
              for _ in range(2)]
    placement.after_inputs()
    if big is not None:
        big.fill_(r)
    kept = []
    for g in groups:
        l2.fill_(r)
        f0, c0, t0 = faults(), time.thread_time_ns(), time.perf_counter_ns()
        outs = [fn(x) for x in g]
        t1, c1, f1 = time.perf_counter_ns(), time.thread_time_ns(), faults()
        kept += outs
        if r >= 2:
            wall.append((t1 - t0) / k * 1e-9); cpu.append((c1 - c0) / k * 1e-9); flt.append(f1 - f0)
    arenas.append(info().arena)
    del groups, kept, outs
    placement.end_round()
    trims += r >= 1 and info().arena < before
print(json.dumps({"wall_per_call_s": statistics.median(wall), "cpu_per_call_s": statistics.median(cpu),
                  "faults_per_sample": statistics.median(flt), "max_faults_per_sample": max(flt),
                  "heap_max_bytes": max(arenas), "trims": trims}))
"""


def run(arm: str, k: int, rounds: int, malloc: str, llc: bool, cpu: int) -> dict:
    from pytest_autotune.sandbox.jail_session import MALLOC_REUSE_ENV, MALLOC_STEADY_ENV

    env = {**os.environ, **(MALLOC_STEADY_ENV if malloc == "steady" else MALLOC_REUSE_ENV), "REPO": str(REPO)}
    out = subprocess.run(["taskset", "-c", str(cpu), sys.executable, "-c", CHILD, arm, str(k), str(rounds),
                          str(int(llc))], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--k", type=int, nargs="+", default=[1, 4, 8, 16, 64])
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--cpu", type=int, default=max(os.sched_getaffinity(0)))
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    sys.path.insert(0, str(REPO))
    rows = []
    print("| malloc | LLC flush | k | reference: wall / CPU us a call | relu: wall / CPU us a call | ratio (CPU) "
          "| faults a sample (ref, relu) | heap MiB (ref) | trims (ref) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for malloc, llc in (("reuse", False), ("steady", False), ("steady", True)):
        for k in args.k:
            res = {arm: run(arm, k, args.rounds, malloc, llc, args.cpu) for arm in ("reference", "relu")}
            rows.append({"malloc": malloc, "llc_flush": llc, "k": k, **res})
            a, b = res["reference"], res["relu"]
            print(f"| {malloc} | {'yes' if llc else 'no'} | {k} | {a['wall_per_call_s'] * 1e6:.0f} / "
                  f"{a['cpu_per_call_s'] * 1e6:.0f} | {b['wall_per_call_s'] * 1e6:.0f} / {b['cpu_per_call_s'] * 1e6:.0f} "
                  f"| {a['cpu_per_call_s'] / b['cpu_per_call_s']:.3f} | {a['faults_per_sample']:.0f}, "
                  f"{b['faults_per_sample']:.0f} | {a['heap_max_bytes'] >> 20} | {a['trims']} |", flush=True)
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
