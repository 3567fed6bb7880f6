"""The per-process offset without the harness (issue 28; docs/harness.md, "Derived input sets"): two processes forked
from one parent after it imported torch (as the harness's zygote forks both sandboxes of a pair: the same code
layout), each with buffers of its own, take turns timing one op at millisecond spacing in ABBA/BAAB rounds, both
pinned to one CPU with the parent on another. The median log(A/B) of a pair of siblings is its offset; a fresh pair
is forked for each line.

    python3 benchmarks/harness/cpu_sibling_offsets.py --op gelu --pairs 8 --rounds 400
    python3 benchmarks/harness/cpu_sibling_offsets.py --op relu --no-thp

With no offset of the process, the pairs' ratios would spread only by their sampling noise (a few tenths of a per
cent over 400 rounds); they spread by several per cent, most for GELU.
"""

from __future__ import annotations

import argparse
import ctypes
import math
import os
import statistics
import struct
import sys

ENV = {"MALLOC_MMAP_THRESHOLD_": str(32 << 20), "MALLOC_TRIM_THRESHOLD_": str(1 << 30),
       "MALLOC_TOP_PAD_": str(64 << 20)}


def _child(rfd: int, wfd: int, op: str, cpu: int, no_thp: bool, flush_mode: str) -> None:
    import time

    import torch

    os.sched_setaffinity(0, {cpu})
    if no_thp:
        ctypes.CDLL(None).prctl(41, 1, 0, 0, 0)  # PR_SET_THP_DISABLE
    flushes = [torch.empty((4 << 20) // 4, dtype=torch.int32) for _ in range(8 if flush_mode == "rotate" else 1)]
    n = 0
    xs = [torch.randn(16, 16384) for _ in range(4)]
    outs = [torch.empty(16, 16384) for _ in range(4)]
    while True:
        b = os.read(rfd, 1)
        if not b or b == b"q":
            os._exit(0)
        i = b[0] % 4
        if flush_mode != "none":
            flushes[n % len(flushes)].fill_(1)
            n += 1
        t0 = time.perf_counter_ns()
        if op == "gelu":
            torch.ops.aten.gelu.out(xs[i], out=outs[i])
        else:
            torch.clamp_min(xs[i], 0, out=outs[i])
        os.write(wfd, struct.pack("q", time.perf_counter_ns() - t0))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--op", choices=("gelu", "relu"), default="gelu")
    ap.add_argument("--pairs", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=400)
    ap.add_argument("--no-thp", action="store_true", help="PR_SET_THP_DISABLE in both siblings, as the sandboxes")
    ap.add_argument("--flush", choices=("fixed", "rotate", "none"), default="fixed",
                    help="the 4 MiB written before every sample: one buffer (the harness's), eight in turn, or none")
    a = ap.parse_args()
    if any(os.environ.get(k) != v for k, v in ENV.items()):  # the sandboxes' malloc settings, before torch loads
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, **ENV})
    import torch

    torch.set_num_threads(1)
    cpus = sorted(os.sched_getaffinity(0))
    work, mine = cpus[-1], cpus[0]
    os.sched_setaffinity(0, {mine})
    medians = []
    for _ in range(a.pairs):
        kids = []
        for _ in range(2):
            r1, w1 = os.pipe()
            r2, w2 = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(w1)
                os.close(r2)
                _child(r1, w2, a.op, work, a.no_thp, a.flush)
            os.close(r1)
            os.close(w2)
            kids.append((pid, w1, r2))
        logs = []
        for r in range(a.rounds):
            order = (0, 1, 1, 0) if r % 2 == 0 else (1, 0, 0, 1)
            t = {0: 0, 1: 0}
            for k in order:
                os.write(kids[k][1], bytes([r % 4]))
                t[k] += struct.unpack("q", os.read(kids[k][2], 8))[0]
            logs.append(math.log(t[0] / t[1]))
        for pid, w, _ in kids:
            os.write(w, b"q")
            os.waitpid(pid, 0)
        medians.append(statistics.median(logs[20:]))
    print(f"{a.op}{' (no THP)' if a.no_thp else ''}, flush {a.flush}: sibling pairs A/B " + " ".join(f"{math.exp(m):.3f}" for m in medians)
          + f"; sd {statistics.stdev(medians) * 100:.1f}% (log), sampling sd of one pair's median ~"
          f"{statistics.stdev(logs) * 1.25 / math.sqrt(len(logs)) * 100:.2f}%")


if __name__ == "__main__":
    main()
