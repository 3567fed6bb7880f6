"""Where the compiled arms' fixed cost per sample goes with the head start, outside the sandboxes (docs/results/h200.md, "The head start").

    python3 benchmarks/harness/gpu/head_start_probe.py --out DIR/headstart.json [--samples 16] [--only 19_ReLU ...]

For each pair -- the nine anchors (KernelBench's eager Model against its torch.compile candidate, at KernelBench's
sizes) and the bundled suite's launch-bound pairs 09_sum_dim and 12_batched_small_matmul -- and each arm, in this
process (no sandbox, no jail), with k as the schedule chooses it from the arm's ``do_bench`` time:

* samples of ``CudaDevice.timed`` with ``head_start = "off"`` and ``"spin"``, the main thread pinned to one CPU as
  the harness pins it: per sample the reported time, event time, enqueue time, the first call's host time (held),
  the hold's GPU time, whether it ran out, and what bound the sample;
* a split sample: the same, with an event after the first call -- the first call's GPU time against the others'
  per call: a gap left between the hold's release and the first kernel shows as a longer first call;
* ``do_bench`` of the same module (median, per call).

Then per pair: base / cand under each mode against ``do_bench``'s, and the compiled arm's extra per sample without
the hold (off minus spin) beside its first call's host time. The sandboxed run's own numbers (``timing_info`` of
each arm: ``first_call_s_median``, ``hold_s_median``, ``release_lag_s_median``) are in the pytest reports;
``anchor_gap.py --probe`` puts both side by side: a first call that costs more in the sandbox than here is the
sandbox's cold host path, and with the hold it is off the clock. The JSON is rewritten after every pair. Without
CUDA it exits with a message.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from outside_timers import REPO, Pair, _do_bench, _setup  # noqa: E402

from pytest_autotune.measure.devices.cuda.device import CudaDevice  # noqa: E402
from pytest_autotune.measure.sampling import choose_calls_per_sample  # noqa: E402
from pytest_autotune.problems.inputs import materialize  # noqa: E402
from pytest_autotune.protocol import load_protocol  # noqa: E402

ANCHORS = ["19_ReLU", "23_Softmax", "25_Swish", "36_RMSNorm_", "39_L2Norm_", "40_LayerNorm",
           "47_Sum_reduction_over_a_dimension", "63_conv_standard_2D__square_input__square_kernel", "88_MinGPTNewGelu"]
PAIRS = [(f"benchmarks/kernels/anchors/{a}.py", "torch_compile", "reference") for a in ANCHORS] + [
    ("benchmarks/kernels/level1/09_sum_dim.py", "torch_sum", "reference"),
    ("benchmarks/kernels/level1/12_batched_small_matmul.py", "bmm", "reference"),
]
MODES = ("off", "spin")


def _med(xs: list) -> Any:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def _samples(dev: CudaDevice, model: Any, sets: list, n: int) -> dict:
    fields = ("seconds", "event_seconds", "enqueue_seconds", "first_call_seconds", "hold_seconds", "host_seconds",
              "hold_expired", "bound", "head_start")
    got: list[dict] = []
    with torch.no_grad():
        for _ in range(2):  # the harness's warm-up round: nothing done once lands in a sample that counts
            dev.timed(model, sets)
        for _ in range(n):
            # the numbers only: a sample keeps its outputs, and sixteen samples of 23_Softmax's 6.4 GB outputs held
            # at once ran the GPU out of memory for the next problems (and slowed that arm's allocations) on
            # 2026-12-05
            sample = dev.timed(model, sets)
            got.append({f: getattr(sample, f) for f in fields})
            del sample
    k = len(sets)
    row = {f: _med([s[f] for s in got]) for f in fields[:6]}
    row["per_call_s"] = row["seconds"] / k
    row["expired"] = sum(bool(s["hold_expired"]) for s in got)
    row["host_bound"] = sum(s["bound"] == "host" for s in got)
    row["head_start"] = sorted({str(s["head_start"]) for s in got})
    row["timing_info"] = {key: v for key, v in dev.timing_info().items() if "head_start" in key or "hold" in key
                          or key.endswith("_median") or key.endswith("_max")}
    return row


def _split(dev: CudaDevice, model: Any, sets: list, n: int) -> dict:
    """The sample's steps with an event after the first call: first call's GPU time, the others' per call."""
    first, rest = [], []
    with torch.no_grad():
        for _ in range(n):
            start, mid, end = (torch.cuda.Event(enable_timing=True) for _ in range(3))
            dev.flush_l2()
            torch.cuda.synchronize()
            ticket = dev._hold_begin()
            start.record()
            outs = [model(*sets[0])]
            mid.record()
            dev._hold_release(ticket)
            outs += [model(*b) for b in sets[1:]]
            end.record()
            torch.cuda.synchronize()
            first.append(start.elapsed_time(mid) * 1e-3)
            if len(sets) > 1:
                rest.append(mid.elapsed_time(end) * 1e-3 / (len(sets) - 1))
            del outs
    out = {"first_call_gpu_s": _med(first), "rest_per_call_gpu_s": _med(rest)}
    if rest:
        out["first_call_gap_s"] = out["first_call_gpu_s"] - out["rest_per_call_gpu_s"]
    return out


def probe_pair(path: str, cand: str, base: str, n: int, plan: Any, proto: Any) -> dict:
    pair = Pair(REPO / path, cand, base)
    row: dict[str, Any] = {"problem": Path(path).stem, "candidate": cand, "baseline": base}
    for arm, model in (("base", pair.base), ("cand", pair.cand)):
        db = _do_bench(pair.call(arm))
        k = choose_calls_per_sample(db, plan)
        sets = [materialize(pair.problem, {"seed": 100 + i, "sizes": pair.sizes}, lambda x: x.cuda()
                            if isinstance(x, torch.Tensor) else x, generate_on=torch.device("cuda")) for i in range(k)]
        res: dict[str, Any] = {"dobench_per_call_s": db, "k": k}
        for mode in MODES:
            dev = CudaDevice(0, {"l2_flush_factor": proto.devices.cuda.l2_flush_factor, "graph_below_s": 0,
                                 "head_start": mode, "head_start_max_s": proto.devices.cuda.head_start_max_s})
            dev.setup(1)
            dev.warm_runtime()
            dev.configure_timing({"graphs": False, "reason": "probe: eager"})
            res[mode] = _samples(dev, model, sets, n)
            res[mode]["split"] = _split(dev, model, sets, max(4, n // 2))
            del dev
        row[arm] = res
        del sets
        torch.cuda.empty_cache()
    for mode in MODES:
        row[f"ratio_{mode}"] = row["base"][mode]["per_call_s"] / row["cand"][mode]["per_call_s"]
    row["ratio_dobench"] = row["base"]["dobench_per_call_s"] / row["cand"]["dobench_per_call_s"]
    for mode in MODES:
        row[f"{mode}_vs_dobench"] = row[f"ratio_{mode}"] / row["ratio_dobench"] - 1
    c = row["cand"]
    row["cand_extra_per_sample_without_hold_s"] = c["off"]["event_seconds"] - c["spin"]["event_seconds"]
    row["cand_first_call_host_s"] = c["spin"]["first_call_seconds"]
    return row


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--samples", type=int, default=16)
    ap.add_argument("--only", nargs="*", help="problem stems to probe (default: all eleven pairs)")
    ap.add_argument("--no-pin", action="store_true", help="leave the main thread on every CPU")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("head_start_probe: no CUDA GPU here; run it on the GPU host", file=sys.stderr)
        return 2
    _setup()
    proto = load_protocol(REPO / "protocol.toml")
    plan = proto.timing_plan("cuda")
    pinned = None
    if not args.no_pin:  # the harness's sandboxes time with their main thread on one CPU
        pinned = max(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {pinned})
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {"torch": torch.__version__, "device": torch.cuda.get_device_name(0),
                              "protocol": proto.version, "pinned_cpu": pinned, "samples": args.samples, "pairs": {}}
    for path, cand, base in PAIRS:
        stem = Path(path).stem
        if args.only and stem not in args.only:
            continue
        t0 = time.perf_counter()
        try:
            row = probe_pair(path, cand, base, args.samples, plan, proto)
        except Exception as e:  # noqa: BLE001 - one pair's failure is reported, the others go on
            row = {"problem": stem, "error": f"{type(e).__name__}: {str(e)[:500]}"}
        row["seconds"] = round(time.perf_counter() - t0, 1)
        result["pairs"][stem] = row
        out.write_text(json.dumps(result, indent=1, default=str))
        if "error" in row:
            print(f"{stem}: {row['error']}", flush=True)
            continue
        print(f"{stem:<48} ratio off {row['ratio_off']:.3f} spin {row['ratio_spin']:.3f} do_bench "
              f"{row['ratio_dobench']:.3f} ({row['spin_vs_dobench']:+.1%}); compiled arm: "
              f"{row['cand_extra_per_sample_without_hold_s'] * 1e6:.0f} us a sample without the hold, first call's host "
              f"{(row['cand_first_call_host_s'] or 0) * 1e6:.0f} us, gap after release "
              f"{(row['cand']['spin']['split'].get('first_call_gap_s') or 0) * 1e6:.1f} us", flush=True)
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
