"""What the sandbox jail costs per item: sandbox start (fork + jail + load of a small problem) and close, with
``[sandbox].isolation = "off"`` against the jail this machine allows, plus the once-per-session costs (the
plan's probe, the zygote's start). Interleaved (off, jail, off, jail, ...) so that machine load hits both alike.

    python benchmarks/harness/jail_overhead.py --repeats 40 [--out docs/data/jail-overhead.json]

Run it as root for the uid path, as a normal user for the user-namespace path. Prints a table (median, p90).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from pytest_autotune.problems.model import SourceFile  # noqa: E402
from pytest_autotune.sandbox.runner import SandboxPool  # noqa: E402

PROBLEM = REPO / "tests" / "cheats" / "problems" / "relu_nonneg.py"


def _init() -> dict:
    return {"threads": 1, "device": {"target": "pytest_autotune.measure.devices.cpu:CpuDevice", "index": 0,
                                      "options": {}},
            "problem": SourceFile.read(PROBLEM).wire(), "candidate": None, "candidate_class": "ModelNew",
            "baseline": None, "baseline_class": "ModelNew", "init_seed": 1, "sizes": {}, "disable_gc": True}


def _pool(isolation: str) -> tuple[SandboxPool, dict]:
    t0 = time.perf_counter()
    pool = SandboxPool(threads=1, timeout_s=60, memory_mb=4096, start_timeout_s=60, isolation=isolation,
                       hide=(), max_processes=256)
    plan = pool.plan
    t1 = time.perf_counter()
    with pool.start(_init(), label="warm"):
        pass
    t2 = time.perf_counter()
    return pool, {"plan_s": t1 - t0, "zygote_and_first_sandbox_s": t2 - t1, "plan": plan.describe()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=40)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    load_before = os.getloadavg()
    pools = {}
    once = {}
    for iso in ("off", "preferred"):
        pools[iso], once[iso] = _pool(iso)
    samples: dict[str, dict[str, list]] = {iso: {"start": [], "close": [], "total": []} for iso in pools}
    init = _init()
    for _ in range(args.repeats):
        for iso, pool in pools.items():
            t0 = time.perf_counter()
            box = pool.start(init, label="bench")
            t1 = time.perf_counter()
            box.close()
            t2 = time.perf_counter()
            samples[iso]["start"].append(t1 - t0)
            samples[iso]["close"].append(t2 - t1)
            samples[iso]["total"].append(t2 - t0)
    for pool in pools.values():
        pool.close()

    def q(xs: list, p: float) -> float:
        xs = sorted(xs)
        return xs[min(len(xs) - 1, int(p * len(xs)))]

    out = {"machine": platform.platform(), "euid": os.geteuid(), "cpus": os.cpu_count(),
           "loadavg_before": load_before, "repeats": args.repeats, "once": once, "per_sandbox": {}}
    print(f"{platform.platform()}, euid {os.geteuid()}, load {load_before[0]:.2f} before, "
          f"{os.getloadavg()[0]:.2f} after, {args.repeats} repeats")
    for iso in pools:
        print(f"  {iso:9s}: {once[iso]['plan']}")
        print(f"             plan+probe {once[iso]['plan_s'] * 1e3:.0f} ms, zygote + first sandbox "
              f"{once[iso]['zygote_and_first_sandbox_s']:.2f} s")
    print(f"{'per sandbox (ms)':18s} {'off median':>11s} {'jail median':>12s} {'off p90':>8s} {'jail p90':>9s} "
          f"{'delta median':>13s}")
    for part in ("start", "close", "total"):
        off, jail = samples["off"][part], samples["preferred"][part]
        row = {"off_median_ms": statistics.median(off) * 1e3, "jail_median_ms": statistics.median(jail) * 1e3,
               "off_p90_ms": q(off, 0.9) * 1e3, "jail_p90_ms": q(jail, 0.9) * 1e3}
        row["delta_median_ms"] = row["jail_median_ms"] - row["off_median_ms"]
        out["per_sandbox"][part] = row
        print(f"{part:18s} {row['off_median_ms']:11.1f} {row['jail_median_ms']:12.1f} {row['off_p90_ms']:8.1f} "
              f"{row['jail_p90_ms']:9.1f} {row['delta_median_ms']:13.1f}")
    out["loadavg_after"] = os.getloadavg()
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
