"""Where does the per-process offset of a CPU A/A come from? (docs/design/protocol.md#pairs-of-processes)

Two sandboxes running the same elementwise op on the same CPU read a few percent apart, by the pair of processes
(07_layer_norm 1.062 and 0.862 in the two pairs of one item on the H200 host). Candidates: where the buffers
landed, by physical page (cache sets of a physically indexed L2/L3) or by address within a page (4K aliasing of
loads against earlier stores). This probe separates them, with no harness in the way:

    python benchmarks/harness/cpu_layout_probe.py --cpu 3 --processes 6 --layouts 10 --out layout.json

Each of ``--processes`` fresh processes (run one after the other, pinned to ``--cpu``, one torch thread) times
every op on ``--layouts`` layouts of its input and output buffers, and each layout twice (a, b):

- ``fresh``: new anonymous mappings (new physical pages) at random 64-byte offsets within a page;
- ``repage``: the same virtual addresses and offsets as the process's first layout, new physical pages
  (``MADV_DONTNEED``, then touched again before timing);
- ``shift``: the first layout's pages, the input and output moved to new random offsets within them.

Per op it prints the spread of three kinds of medians (median |log(x / median)|): a against b of one layout (the
noise floor), layouts within a process, and process means. If layouts within a process spread as processes do,
placement is the offset, and a process that times over many layouts averages it out.
"""

from __future__ import annotations

import argparse
import json
import math
import mmap
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

PAGE = 4096


def _ops(torch) -> dict[str, Callable]:  # noqa: ANN001
    aten = torch.ops.aten
    return {
        "relu": lambda x, o: torch.clamp(x, min=0, out=o),
        "tanh": lambda x, o: torch.tanh(x, out=o),
        "hardswish": lambda x, o: aten.hardswish.out(x, out=o),
        "gelu_tanh": lambda x, o: aten.gelu.out(x, approximate="tanh", out=o),
    }


class Buffer:
    """A float32 tensor of n elements in its own anonymous mapping, at a chosen offset (a multiple of 64) in a page."""

    def __init__(self, torch, n: int, offset: int) -> None:  # noqa: ANN001
        self.torch, self.n = torch, n
        self.map = mmap.mmap(-1, n * 4 + PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        self.place(offset)

    def place(self, offset: int) -> None:
        self.offset = offset
        self.t = self.torch.frombuffer(self.map, dtype=self.torch.float32, count=self.n, offset=offset)

    def repage(self) -> None:
        self.t = None
        self.map.madvise(mmap.MADV_DONTNEED)
        self.place(self.offset)


def _time(fn: Callable, x, o, seconds: float) -> float:  # noqa: ANN001
    """Median seconds per call over 25 samples of k back-to-back calls (k: ~seconds / 25 per sample)."""
    for _ in range(3):
        fn(x, o)
    t0 = time.perf_counter()
    fn(x, o)
    one = max(time.perf_counter() - t0, 1e-7)
    k = max(1, int(seconds / 25 / one))
    samples = []
    for _ in range(25):
        t0 = time.perf_counter_ns()
        for _ in range(k):
            fn(x, o)
        samples.append((time.perf_counter_ns() - t0) / k * 1e-9)
    return statistics.median(samples)


def child(args: argparse.Namespace) -> dict:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(1)
    os.sched_setaffinity(0, {args.cpu})
    rng = random.Random(args.seed)
    n = args.mib * (1 << 20) // 4
    ops = _ops(torch)
    out: dict = {"pid": os.getpid(), "ops": {}}
    for name, fn in ops.items():
        first_x = Buffer(torch, n, 64 * rng.randrange(64))
        first_o = Buffer(torch, n, 64 * rng.randrange(64))
        rows = []
        for layout in range(args.layouts):
            for kind in ("fresh", "repage", "shift"):
                if kind == "fresh":
                    x, o = (first_x, first_o) if layout == 0 else (Buffer(torch, n, 64 * rng.randrange(64)),
                                                                   Buffer(torch, n, 64 * rng.randrange(64)))
                elif kind == "repage":
                    if layout == 0:
                        continue
                    x, o = first_x, first_o
                    x.repage()
                    o.repage()
                else:
                    if layout == 0:
                        continue
                    x, o = first_x, first_o
                    x.place(64 * rng.randrange(64))
                    o.place(64 * rng.randrange(64))
                gen = torch.Generator().manual_seed(layout)
                x.t.copy_(torch.randn(n, generator=gen))
                o.t.zero_()
                a = _time(fn, x.t, o.t, args.seconds)
                b = _time(fn, x.t, o.t, args.seconds)
                rows.append({"layout": layout, "kind": kind, "a": a, "b": b, "x_off": x.offset, "o_off": o.offset})
                if kind == "fresh" and layout:
                    del x, o
        out["ops"][name] = rows
    return out


def _spread(values: list[float]) -> float:
    m = statistics.median(values)
    return statistics.median(abs(math.log(v / m)) for v in values)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cpu", type=int, default=max(os.sched_getaffinity(0)))
    ap.add_argument("--processes", type=int, default=6)
    ap.add_argument("--layouts", type=int, default=10)
    ap.add_argument("--mib", type=int, default=4, help="size of the input and of the output (4: the bundled Level-1)")
    ap.add_argument("--seconds", type=float, default=0.05, help="timed seconds per measurement")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(args)))
        return 0
    procs = []
    for p in range(args.processes):
        cmd = [sys.executable, __file__, "--child", "--cpu", str(args.cpu), "--layouts", str(args.layouts),
               "--mib", str(args.mib), "--seconds", str(args.seconds), "--seed", str(args.seed * 1000 + p)]
        procs.append(json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout))
        print(f"process {p + 1}/{args.processes} done", file=sys.stderr, flush=True)
    summary: dict = {}
    for op in procs[0]["ops"]:
        noise, fresh_in, repage_in, shift_in, process_means = [], [], [], [], []
        for pr in procs:
            rows = pr["ops"][op]
            noise += [abs(math.log(r["a"] / r["b"])) for r in rows]
            by = {k: [(r["a"] + r["b"]) / 2 for r in rows if r["kind"] == k] for k in ("fresh", "repage", "shift")}
            fresh_in.append(_spread(by["fresh"]))
            repage_in.append(_spread(by["fresh"][:1] + by["repage"]))
            shift_in.append(_spread(by["fresh"][:1] + by["shift"]))
            process_means.append(statistics.median(by["fresh"]))
        first_layouts = [statistics.median([(r["a"] + r["b"]) / 2 for r in pr["ops"][op] if r["layout"] == 0])
                         for pr in procs]
        summary[op] = {
            "noise_a_vs_b": statistics.median(noise),
            "layouts_fresh_within_process": statistics.median(fresh_in),
            "layouts_repage_within_process": statistics.median(repage_in),
            "layouts_shift_within_process": statistics.median(shift_in),
            "processes_first_layout": _spread(first_layouts),
            "processes_median_over_layouts": _spread(process_means),
            "median_s": statistics.median(process_means),
        }
    print(f"{'op':<10} {'median':>8} {'a vs b':>7} {'fresh':>7} {'repage':>7} {'shift':>7} {'proc(1)':>8} "
          f"{'proc(L)':>8}   (median |log| spreads, %)")
    for op, s in summary.items():
        print(f"{op:<10} {s['median_s'] * 1e6:7.0f}us {100 * s['noise_a_vs_b']:6.2f} "
              f"{100 * s['layouts_fresh_within_process']:7.2f} {100 * s['layouts_repage_within_process']:7.2f} "
              f"{100 * s['layouts_shift_within_process']:7.2f} {100 * s['processes_first_layout']:8.2f} "
              f"{100 * s['processes_median_over_layouts']:8.2f}")
    if args.out:
        Path(args.out).write_text(json.dumps({"args": vars(args), "summary": summary, "processes": procs}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
