"""Does a large block land on pages an earlier one wrote, with glibc told never to map a block on its own? (
docs/results/cpu-2026-12-03.md#what-the-per-process-offset-is-not-code-numa-a-shared-component-large-blocks-from-the-heap-2026-12-03-dfbd585)

Each iteration allocates one tensor of ``--mib`` MiB (torch's CPU allocator: ``posix_memalign`` with 64-byte
alignment), writes it, keeps a few small allocations (as a call's Python objects and a harness's bookkeeping do) and
frees the tensor; it prints the page faults each iteration's tensor took. Run it under the sandboxes' "reuse"
settings, with and without the heap-only ones:

    python3 benchmarks/harness/cpu_large_block_faults.py --env reuse
    python3 benchmarks/harness/cpu_large_block_faults.py --env heap

It re-executes itself with the environment chosen (glibc reads it at start-up).
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys

from pytest_autotune.sandbox.jail_session import MALLOC_REUSE_ENV

HEAP_ENV = {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(1 << 44)}


def faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def child(mib: int, iterations: int) -> None:
    import torch

    n = (mib << 20) // 4
    keep = []
    got = []
    for _ in range(iterations):
        before = faults()
        x = torch.empty(n)
        x.fill_(2.0)
        got.append(faults() - before)
        keep.append([object() for _ in range(1000)])
        keep.append(torch.empty(1000))
        del x
    rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss >> 10
    print(f"{mib} MiB a block: page faults per iteration {got}; peak RSS {rss_mib} MiB")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--env", choices=("reuse", "heap"), default="heap")
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--iterations", type=int, default=10)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(a.mib, a.iterations)
        return 0
    env = dict(os.environ, **MALLOC_REUSE_ENV)
    if a.env == "heap":
        env.update(HEAP_ENV)
    print(f"--env {a.env}: " + " ".join(f"{k}={env[k]}" for k in sorted(env) if k.startswith("MALLOC_")), flush=True)
    return subprocess.call([sys.executable, __file__, "--child", "--mib", str(a.mib), "--iterations",
                            str(a.iterations)], env=env)


if __name__ == "__main__":
    sys.exit(main())
