"""Does the baseline's time depend on the candidate it is paired with? (allocator interplay)

Times the baseline in two sandboxes side by side, round by round: one clean (baseline against itself), one
paired with a candidate. With glibc's default malloc, large temporaries go to mmap and back with a threshold
that adapts to what was freed before, so the baseline's time depends on its neighbour's allocations; with
[sandbox].malloc = "reuse" it should not.

    python benchmarks/harness/allocator_interplay.py PROBLEM.py CANDIDATE.py [default|reuse] [--rounds N]
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from pytest_autotune.problems.loader import LoadedProblem
from pytest_autotune.problems.model import SourceFile
from pytest_autotune.sandbox.jail_session import MALLOC_REUSE_ENV
from pytest_autotune.sandbox.runner import SandboxPool


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("problem", type=Path)
    ap.add_argument("candidate", type=Path)
    ap.add_argument("malloc", choices=["default", "reuse"], default="reuse", nargs="?")
    ap.add_argument("--rounds", type=int, default=30)
    a = ap.parse_args()
    lp = LoadedProblem.load(SourceFile.read(a.problem))
    sizes = lp.sizes_for("cpu")
    pool = SandboxPool(threads=1, timeout_s=60, memory_mb=8000, start_timeout_s=60,
                       env_extra=MALLOC_REUSE_ENV if a.malloc == "reuse" else {})

    def init(cand: Path | None) -> dict:
        return {"threads": 1, "device": {"target": "pytest_autotune.measure.devices.cpu:CpuDevice"},
                "problem": SourceFile.read(a.problem).wire(),
                "candidate": SourceFile.read(cand).wire() if cand else None, "candidate_class": "ModelNew",
                "init_seed": 1, "sizes": sizes}

    clean, item = pool.start(init(None), "clean"), pool.start(init(a.candidate), "item")
    for b in (clean, item):
        b.request({"cmd": "calibrate", "warmup": [{"seed": s} for s in range(3)]})
    a_clean, a_item, cand = [], [], []
    for r in range(a.rounds):
        for b in (clean, item):
            b.request({"cmd": "prepare", "p1": [{"seed": 1000 + r}], "p2": [{"seed": 2000 + r}]})
        gc_, gi = clean.request({"cmd": "go"}), item.request({"cmd": "go"})
        for b in (clean, item):
            b.request({"cmd": "fingerprint", "positions_seed": 1})
        a_clean += [gc_["samples"][0][0], gc_["samples"][3][0]]
        a_item += [gi["samples"][0][0], gi["samples"][3][0]]
        cand += [gi["samples"][1][0], gi["samples"][2][0]]
    m = statistics.median
    print(f"{a.problem.stem:24s} malloc={a.malloc:7s} baseline clean {m(a_clean) * 1e3:7.3f} ms, beside the candidate "
          f"{m(a_item) * 1e3:7.3f} ms (ratio {m(a_item) / m(a_clean):.3f}); candidate {m(cand) * 1e3:7.3f} ms, "
          f"speedup {m(a_item) / m(cand):.2f}x")
    clean.close()
    item.close()
    pool.close()


if __name__ == "__main__":
    main()
