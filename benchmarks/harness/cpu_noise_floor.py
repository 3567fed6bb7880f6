"""The CPU's noise floor outside the harness (docs/design/protocol.md#derived-input-sets): what no harness
change can remove on this machine.

    python3 benchmarks/harness/cpu_noise_floor.py ratios      # per-ratio noise of adjacent samples vs sample length
    python3 benchmarks/harness/cpu_noise_floor.py processes   # per-process offsets: GELU in fresh processes

``ratios``: one process on one CPU times ReLU A/A in ABBA order (the harness's: two arms on the same inputs, a cache
flush of 4 MiB before every sample, outputs preallocated so no page fault is timed) for several input sizes and
calls per sample, and prints the robust standard deviation (IQR / 1.349) of log(A/B) per pair of adjacent samples.

``processes``: fresh processes, one after the other, each timing GELU on 16 x 16384 floats (KernelBench v0's size)
for a few seconds, in chunks; then the same under ``setarch -R`` (no address-space randomisation); then one
process timing eight buffer pairs of its own in turn. A chunk's median is a process's time: chunks agree within a
process and differ between processes, whatever the buffers and with ASLR off.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import statistics
import subprocess
import sys
import time

from pytest_autotune.sandbox.jail_session import MALLOC_REUSE_ENV

ENV = {**os.environ, **MALLOC_REUSE_ENV}  # the sandboxes' malloc settings

RATIOS = r"""
import math, sys, time, torch
torch.set_num_threads(1)
n, k, secs = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
flush = torch.empty((4 << 20) // 4, dtype=torch.int32)
xs = [torch.randn(n) for _ in range(2 * k)]
outs = [torch.empty(n) for _ in range(2 * k)]
clock = time.perf_counter_ns
def sample(at):
    flush.fill_(1)
    t0 = clock()
    for j in range(k):
        torch.clamp_min(xs[at + j], 0, out=outs[at + j])
    return clock() - t0
logs, times = [], []
end = time.time() + secs
while time.time() < end:
    a1 = sample(0); b1 = sample(0); b2 = sample(k); a2 = sample(k)
    logs += [math.log(a1 / b1), math.log(a2 / b2)]
    times += [a1, b1, b2, a2]
logs.sort(); times.sort()
q = lambda v, p: v[int(p * (len(v) - 1))]
print(n, k, q(times, 0.5) / 1e6, len(logs), (q(logs, 0.75) - q(logs, 0.25)) / 1.349)
"""

PROCESS = r"""
import statistics, sys, time, torch
torch.set_num_threads(1)
flush = torch.empty((4 << 20) // 4, dtype=torch.int32)
def chunk(secs):
    meds = []
    end = time.time() + secs
    while time.time() < end:
        xs = [torch.randn(16, 16384) for _ in range(8)]
        ts = []
        for x in xs:
            flush.fill_(1); t0 = time.perf_counter_ns(); torch.nn.functional.gelu(x); ts.append(time.perf_counter_ns() - t0)
        meds.append(statistics.median(ts))
    return statistics.median(meds) / 1e3
print(" ".join(f"{chunk(float(sys.argv[1])):.1f}" for _ in range(int(sys.argv[2]))))
"""

BUFFERS = r"""
import statistics, time, torch
torch.set_num_threads(1)
flush = torch.empty((4 << 20) // 4, dtype=torch.int32)
pairs = [(torch.randn(16, 16384), torch.empty(16, 16384)) for _ in range(8)]
res = [[] for _ in pairs]
for _ in range(300):
    for i, (x, o) in enumerate(pairs):
        flush.fill_(1); t0 = time.perf_counter_ns(); torch.ops.aten.gelu.out(x, out=o)
        res[i].append(time.perf_counter_ns() - t0)
print(" ".join(f"{statistics.median(v) / 1e3:.1f}" for v in res))
"""


def _cpu() -> list[str]:
    last = max(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    return ["taskset", "-c", str(last)] if last is not None and shutil.which("taskset") else []


def _run(code: str, *args: str, prefix: tuple = ()) -> str:
    out = subprocess.run([*prefix, *_cpu(), sys.executable, "-c", code, *args], env=ENV, capture_output=True,
                         text=True, check=True)
    return out.stdout.strip()


def ratios(secs: float) -> None:
    print("| floats | calls per sample | sample (ms) | ratios | robust sd of log(A/B) |\n|---|---|---|---|---|")
    for n, k in ((262144, 1), (262144, 8), (1 << 20, 1), (1 << 20, 2), (1 << 20, 8), (1 << 22, 2)):
        n_, k_, ms, count, sd = _run(RATIOS, str(n), str(k), str(secs)).split()
        print(f"| {n_} | {k_} | {float(ms):.3f} | {count} | {float(sd) * 100:.1f}% |")


def processes(n: int, chunk_s: float, chunks: int) -> None:
    rows = [("fresh process", ())]
    if shutil.which("setarch"):
        rows.append(("fresh process, setarch -R (no ASLR)", ("setarch", "-R")))
    medians: dict[str, list[float]] = {}
    print(f"GELU, 16 x 16384 floats, one thread: medians (us) of {chunks} chunks of {chunk_s} s per process\n")
    for label, prefix in rows:
        for i in range(n):
            line = _run(PROCESS, str(chunk_s), str(chunks), prefix=prefix)
            vals = [float(v) for v in line.split()]
            medians.setdefault(label, []).append(statistics.median(vals))
            print(f"{label} {i}: {line}")
    for label, meds in medians.items():
        spread = (max(meds) / min(meds) - 1) * 100
        print(f"{label}: process medians {min(meds):.1f}-{max(meds):.1f} us ({spread:.1f}% apart), "
              f"sd {statistics.stdev([math.log(m) for m in meds]) * 100:.1f}% (log)")
    for i in range(3):
        print(f"one process, eight buffer pairs of its own (us): {_run(BUFFERS)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("ratios")
    r.add_argument("--seconds", type=float, default=5.0)
    p = sub.add_parser("processes")
    p.add_argument("--n", type=int, default=6)
    p.add_argument("--chunk-seconds", type=float, default=1.0)
    p.add_argument("--chunks", type=int, default=4)
    a = ap.parse_args()
    t0 = time.time()
    if a.cmd == "ratios":
        ratios(a.seconds)
    else:
        processes(a.n, a.chunk_seconds, a.chunks)
    print(f"\n({time.time() - t0:.0f} s, load {os.getloadavg()[0]:.2f})")


if __name__ == "__main__":
    main()
