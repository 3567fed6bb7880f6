"""Where does the CUDA device's per-call excess over triton's do_bench come from? (docs/results/h200.md)

    python3 benchmarks/harness/gpu/gap_probe.py --out gap.json

On the H200 our eager per-call times of sub-millisecond memory-bound calls read ~11 us above do_bench's in both
arms (02_relu: 502 vs 491 us baseline, 268 vs 257 us candidate), which pulls every ratio towards 1. This script
times the same pairs in one process, without the sandboxes, in variants that each change one thing:

* ``dobench``: triton's do_bench median (its own flush before every call, one fixed input);
* ``harness``: ``CudaDevice.timed`` itself (flush, sync, start event, ``k`` calls on ``k`` distinct input sets with
  the outputs kept, end event, sync), samples back to back;
* ``harness_idle``: the same with the host idle for 3 ms before every sample (the sandbox waits on its socket for
  the controller's next request between samples);
* ``harness_busy``: the same 3 ms spent spinning on the host instead;
* ``split``: flush, sync, start, call 1, event, calls 2..k, end -- the first call's time (start to event) against
  the per-call time of the rest: the per-sample excess ``g`` directly, with the host idle before the sample;
* ``preroll``: flush, sync, a GPU spin (``torch.cuda._sleep``), start, calls, end: the launch gap removed (not a
  safe measurement in eager mode: a side stream can work during the spin -- here only to size the gap);
* ``wakeN`` / ``split_wakeN``: ``split`` with a GPU spin of N us after the flush, before the synchronisation (safe:
  nothing of the sample can run beside it). Tried as a fix on 2026-12-01: it did not shorten the gap, so the gap is
  the first launch after the synchronisation, not a GPU that went idle between samples.

Each variant prints per-call microseconds (median of samples) and the ratio base / cand. On a machine without
CUDA it exits with a message.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from outside_timers import REPO, Pair, _do_bench, _setup  # noqa: E402

from pytest_autotune.measure.devices.cuda.device import CudaDevice  # noqa: E402
from pytest_autotune.problems.inputs import materialize  # noqa: E402

PAIRS = [
    ("benchmarks/kernels/level1/02_relu.py", "relu", "reference"),
    ("benchmarks/kernels/level1/01_scaled_add.py", "add_alpha", "reference"),
    ("benchmarks/harness/gpu/problems/aa_relu_130us.py", "reference-aa", "reference"),
]


def _inputs(pair: Pair, k: int, seed: int) -> list:
    return [materialize(pair.problem, {"seed": seed + i, "sizes": pair.sizes}, lambda x: x.cuda()
                        if isinstance(x, torch.Tensor) else x) for i in range(k)]


def _spin(seconds: float) -> None:
    t = time.perf_counter() + seconds
    while time.perf_counter() < t:
        pass


MODES = ("harness", "harness_idle", "harness_busy", "split", "preroll", "wake50", "wake200", "wake1000",
         "split_wake200", "split_wake1000")


def variant(dev: CudaDevice, model: Any, sets: list, mode: str, n: int) -> dict:
    k = len(sets)
    wake_s = float(mode.rsplit("wake", 1)[1]) * 1e-6 if "wake" in mode else 0.0
    if mode.startswith("wake"):
        mode = "split"
    per_call, first, rest = [], [], []
    for i in range(n):
        if mode in ("harness_idle", "preroll") or mode.startswith("split"):
            time.sleep(0.003)
        elif mode == "harness_busy":
            _spin(0.003)
        if mode.startswith("harness"):  # CudaDevice.timed itself
            s = dev.timed(model, sets)
            per_call.append(s.seconds / k)
            del s
            continue
        start, mid, end = (torch.cuda.Event(enable_timing=True) for _ in range(3))
        dev.flush_l2()
        if wake_s:
            torch.cuda._sleep(int(wake_s * 2e9))  # the GPU kept busy up to the sync (~2 GHz SM clock)
        torch.cuda.synchronize()
        if mode == "preroll":
            torch.cuda._sleep(100_000)
        start.record()
        outs = [model(*sets[0])]
        mid.record()
        for b in sets[1:]:
            outs.append(model(*b))
        end.record()
        torch.cuda.synchronize()
        total = start.elapsed_time(end) * 1e-3
        per_call.append(total / k)
        f = start.elapsed_time(mid) * 1e-3
        first.append(f)
        if k > 1:
            rest.append(mid.elapsed_time(end) * 1e-3 / (k - 1))
        del outs
    out = {"per_call_us": statistics.median(per_call) * 1e6, "n": n, "k": k}
    if first:
        out["first_call_us"] = statistics.median(first) * 1e6
    if rest:
        out["rest_per_call_us"] = statistics.median(rest) * 1e6
        out["gap_us"] = out["first_call_us"] - out["rest_per_call_us"]
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="gap.json")
    ap.add_argument("--n", type=int, default=40)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("gap_probe: no CUDA GPU here; run it on the GPU host", file=sys.stderr)
        return 2
    _setup()
    dev = CudaDevice(0, {"l2_flush_factor": 2, "graph_below_s": 0})
    dev.setup(1)
    dev.warm_runtime()
    dev.configure_timing({"graphs": False, "reason": "gap probe: eager"})
    results: dict[str, Any] = {"torch": torch.__version__, "device": torch.cuda.get_device_name(0), "pairs": {}}
    for path, cand, base in PAIRS:
        pair = Pair(REPO / path, cand, base)
        row: dict[str, Any] = {}
        for arm, model in (("base", pair.base), ("cand", pair.cand)):
            fn: Callable[[], Any] = pair.call(arm)
            db = _do_bench(fn) * 1e6
            k = max(1, int(1e-3 / (db * 1e-6)) + 1)
            sets = _inputs(pair, k, 100)
            with torch.no_grad():
                for _ in range(3):
                    model(*sets[0])
                res = {"dobench_per_call_us": db}
                for mode in MODES:
                    res[mode] = variant(dev, model, sets, mode, args.n)
            row[arm] = res
            del sets
            torch.cuda.empty_cache()
        for mode in MODES:
            row[f"ratio_{mode}"] = row["base"][mode]["per_call_us"] / row["cand"][mode]["per_call_us"]
        row["ratio_dobench"] = row["base"]["dobench_per_call_us"] / row["cand"]["dobench_per_call_us"]
        results["pairs"][Path(path).stem] = row
        print(Path(path).stem, json.dumps(row, indent=1), flush=True)
        Path(args.out).write_text(json.dumps(results, indent=1))
        del pair
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
