"""Why do launch-bound references read slower in the harness than under do_bench? Time them here, in one plain
process, with the main thread free and pinned to each CPU in turn.

    python3 benchmarks/harness/gpu/launch_probe.py --out launch-probe.json [--passes 3]

A launch-bound reference (09_sum_dim: a Python loop of 64 slice-adds; 12_batched_small_matmul: 128 small matmuls)
takes as long on the GPU as the host takes to launch it, so its per-call time is the speed of the CPU its main
thread runs on. The harness pins both sandboxes' main threads to one CPU for the samples (the last allowed one,
``[timing].pin``); do_bench runs where the scheduler puts it. Each condition (``free``, ``cpuN``) is timed with
CUDA events around ``k`` back-to-back calls, in a shuffled order, ``--passes`` times. Also recorded: each CPU's
``/proc/stat`` deltas over the probe (steal, irq, softirq: what else ran there) and the lines of
``/proc/interrupts`` naming nvidia. A memory-bound control (02_relu) shows what a CPU does not change.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from outside_timers import CUDA, REPO, Pair, _setup  # noqa: E402

PAIRS = [("09_sum_dim", "torch_sum"), ("12_batched_small_matmul", "bmm"), ("02_relu", "relu")]


def _per_call(fn, k: int, reps: int) -> tuple[float, float]:
    """(device seconds per call, host seconds per call): medians over ``reps`` groups of ``k`` calls."""
    dev, host = [], []
    for _ in range(reps):
        if CUDA:
            torch.cuda.synchronize()
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            t0 = time.perf_counter()
            a.record()
            for _ in range(k):
                fn()
            b.record()
            t1 = time.perf_counter()
            torch.cuda.synchronize()
            dev.append(a.elapsed_time(b) * 1e-3 / k)
        else:
            t0 = time.perf_counter()
            for _ in range(k):
                fn()
            t1 = time.perf_counter()
            dev.append((t1 - t0) / k)
        host.append((t1 - t0) / k)
    return statistics.median(dev), statistics.median(host)


def _proc_stat() -> dict[str, list[int]]:
    rows = {}
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith("cpu") and line[3:4].isdigit():
            name, *vals = line.split()
            rows[name] = [int(v) for v in vals]
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    _setup()
    problems = REPO / "benchmarks" / "kernels" / "level1"
    pairs = {p: Pair(problems / f"{p}.py", c, "reference") for p, c in PAIRS}
    allowed = sorted(os.sched_getaffinity(0))
    conds = ["free"] + [f"cpu{c}" for c in allowed]
    for pair in pairs.values():  # warm: first launches, allocator, cuBLAS handles
        for which in ("base", "cand"):
            _per_call(pair.call(which), 3, 2)
    stat0 = _proc_stat()
    rows = []
    rng = random.Random(0)
    for n in range(args.passes):
        order = conds[:]
        rng.shuffle(order)
        for cond in order:
            os.sched_setaffinity(0, set(allowed) if cond == "free" else {int(cond[3:])})
            for name, pair in pairs.items():
                for which in ("base", "cand"):
                    d, h = _per_call(pair.call(which), args.k, args.reps)
                    rows.append({"pass": n, "cond": cond, "problem": name, "arm": which, "device_s": d, "host_s": h})
        os.sched_setaffinity(0, set(allowed))
        print(f"pass {n} done", flush=True)
    stat1 = _proc_stat()
    fields = ["user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal"]
    stat = {c: dict(zip(fields, [b - a for a, b in zip(stat0[c], stat1[c])])) for c in stat1 if c in stat0}
    try:
        irqs = [ln for ln in Path("/proc/interrupts").read_text().splitlines()[1:] if "nvidia" in ln.lower()]
    except OSError:
        irqs = []
    summary = {}
    for cond in conds:
        for name in pairs:
            for which in ("base", "cand"):
                vals = [r["device_s"] for r in rows if r["cond"] == cond and r["problem"] == name and r["arm"] == which]
                summary.setdefault(cond, {})[f"{name}/{which}_us"] = round(statistics.median(vals) * 1e6, 1)
        b09, c09 = summary[cond]["09_sum_dim/base_us"], summary[cond]["09_sum_dim/cand_us"]
        b12, c12 = summary[cond]["12_batched_small_matmul/base_us"], summary[cond]["12_batched_small_matmul/cand_us"]
        summary[cond]["09_ratio"], summary[cond]["12_ratio"] = round(b09 / c09, 3), round(b12 / c12, 3)
    out = {"cmd": " ".join(sys.argv), "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "torch": torch.__version__, "cpus": allowed, "rows": rows, "summary": summary, "proc_stat": stat,
           "nvidia_irqs": irqs}
    Path(args.out).write_text(json.dumps(out, indent=1))
    print(f"{'cond':6} {'09 ref us':>10} {'09 cand':>8} {'09 x':>6} {'12 ref us':>10} {'12 cand':>8} {'12 x':>6} "
          f"{'02 ref':>8}  steal irq softirq (ticks over the probe)")
    for cond in conds:
        s = summary[cond]
        st = stat.get(f"cpu{cond[3:]}", {}) if cond != "free" else {}
        print(f"{cond:6} {s['09_sum_dim/base_us']:10.1f} {s['09_sum_dim/cand_us']:8.1f} {s['09_ratio']:6.2f} "
              f"{s['12_batched_small_matmul/base_us']:10.1f} {s['12_batched_small_matmul/cand_us']:8.1f} "
              f"{s['12_ratio']:6.2f} {s['02_relu/base_us']:8.1f}  {st.get('steal', '')} {st.get('irq', '')} "
              f"{st.get('softirq', '')}")
    for ln in irqs:
        print(ln[:200])


if __name__ == "__main__":
    main()
