"""Does a precompiled ``torch/extension.h`` shorten a ``load_inline`` build, and does it leave the object code alone?
(docs/results/cpu-2026-12-06.md, "Precompiled torch headers")

    python3 benchmarks/harness/build_pch.py --reps 3 --out docs/data/build-pch-<date>.json

torch's ``load_inline(use_pch=True)`` writes ``extension.h.gch`` into torch's own include folder, which the build
sandbox sees read-only; so this measures the same mechanism with the header precompiled into a folder of its own
that is searched first: gcc looks for ``<dir>/torch/extension.h.gch`` in each ``-I`` folder before torch's
``-isystem`` folders, and uses it only where the flags it was made with match; else it reads the header beside it
(here a link to torch's own), silently.
Each variant builds a realistic extension (``torch/extension.h``, ``functions=[...]``, pybind11 bindings) ``--reps``
times into fresh folders under fresh names, with ``MAX_JOBS=1``; it records each build's wall time and its
compilers' CPU time (``RUSAGE_CHILDREN``), whether gcc used the .gch for it (``-H``), and whether ``main.o`` is byte
for byte the one built without the header precompiled (the extension's name is the same for that one comparison).
The header is precompiled with the flags torch gives ``main.cpp`` less ``-DTORCH_EXTENSION_NAME``: made with the
name, a .gch serves that one extension only.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import re
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SOURCE = r"""
#include <torch/extension.h>
torch::Tensor relu_forward(torch::Tensor x) {
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    const float* a = xc.data_ptr<float>();
    float* b = y.data_ptr<float>();
    for (int64_t i = 0; i < xc.numel(); ++i) b[i] = a[i] < 0.0f ? 0.0f : a[i];
    return y;
}
"""


def build(name: str, folder: Path, include: list[str]) -> dict:
    """One build in a fresh interpreter (torch would rename a second extension of one name in one process), its
    compilers' CPU time from ``RUSAGE_CHILDREN``."""
    folder.mkdir(parents=True)
    r0, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    subprocess.run([sys.executable, __file__, "--one", name, str(folder), *include], check=True)
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    main_o = folder / "main.o"
    return {"wall_s": round(time.perf_counter() - t0, 2),
            "cpu_s": round(r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime, 2),
            "main_o_sha256": hashlib.sha256(main_o.read_bytes()).hexdigest() if main_o.exists() else None}


def one(name: str, folder: str, include: list[str]) -> None:
    from torch.utils.cpp_extension import load_inline

    load_inline(name, cpp_sources=SOURCE, functions=["relu_forward"], extra_cflags=["-O3"],
                extra_include_paths=include or None, build_directory=folder, keep_intermediates=True)


def precompile(reference: Path, out: Path) -> dict:
    """``torch/extension.h`` precompiled with the flags torch gave ``main.cpp`` in ``reference``'s build.ninja."""
    import torch

    ninja = (reference / "build.ninja").read_text()
    cflags = shlex.split(re.search(r"^cflags = (.*)$", ninja, re.M).group(1))  # type: ignore[union-attr]
    # the extension's name is each build's own: made with it, the .gch serves that one extension only ("not used
    # because TORCH_EXTENSION_NAME defined as ... not ..."); made without it, every extension of these flags
    cflags = [f for f in cflags if not f.startswith("-DTORCH_EXTENSION_NAME=")]
    cxx = re.search(r"^cxx = (.*)$", ninja, re.M).group(1).strip()  # type: ignore[union-attr]
    header = Path(torch.__file__).parent / "include" / "torch" / "extension.h"
    target = out / "torch" / "extension.h.gch"
    target.parent.mkdir(parents=True)
    # gcc reads the header from the folder it found the .gch in when it cannot use the .gch (other flags): there it
    # is torch's own, so such a build is the build without one
    (out / "torch" / "extension.h").symlink_to(header)
    r0, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    subprocess.run([cxx, "-x", "c++-header", str(header), "-o", str(target), *cflags], check=True)
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"wall_s": round(time.perf_counter() - t0, 2),
            "cpu_s": round(r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime, 2),
            "bytes": target.stat().st_size}


def pch_used(folder: Path) -> bool:
    """Whether gcc uses the .gch for ``folder``'s main.cpp (its build.ninja's flags, ``-H``: a used one is marked
    ``!``; ``-Winvalid-pch`` says why not)."""
    ninja = (folder / "build.ninja").read_text()
    cflags = shlex.split(re.search(r"^cflags = (.*)$", ninja, re.M).group(1))  # type: ignore[union-attr]
    cxx = re.search(r"^cxx = (.*)$", ninja, re.M).group(1).strip()  # type: ignore[union-attr]
    out = subprocess.run([cxx, *cflags, "-Winvalid-pch", "-H", "-fsyntax-only", str(folder / "main.cpp")],
                         capture_output=True, text=True)
    return any(line.startswith("! ") and line.endswith(".gch") for line in out.stderr.splitlines())


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", default=None)
    ap.add_argument("--one", nargs="+", help=argparse.SUPPRESS)  # NAME FOLDER [INCLUDE]: one build, in this process
    args = ap.parse_args(argv)
    if args.one:
        one(args.one[0], args.one[1], args.one[2:])
        return 0
    os.environ["MAX_JOBS"] = "1"
    import torch

    work = Path(tempfile.mkdtemp(prefix="autotune-pch-"))
    result: dict = {"torch": torch.__version__, "cxx": subprocess.run(["c++", "--version"], capture_output=True,
                                                                      text=True).stdout.splitlines()[0],
                    "python": platform.python_version(), "cores": os.cpu_count(), "reps": args.reps,
                    "loadavg_before": os.getloadavg()}
    ref = build("pch_ref", work / "ref", [])
    result["precompile"] = precompile(work / "ref", work / "pch")
    same = build("pch_ref", work / "same", [str(work / "pch")])  # the same name: main.o must be the same bytes
    result["main_o_identical"] = ref["main_o_sha256"] == same["main_o_sha256"]
    for variant, include in (("plain", []), ("pch", [str(work / "pch")])):
        runs = [build(f"pch_{variant}_{i}", work / f"{variant}{i}", include) for i in range(args.reps)]
        result[variant] = {"runs": runs, "median_wall_s": statistics.median(r["wall_s"] for r in runs),
                           "median_cpu_s": statistics.median(r["cpu_s"] for r in runs),
                           "pch_used": [pch_used(work / f"{variant}{i}") for i in range(args.reps)]}
    result["loadavg_after"] = os.getloadavg()
    print(json.dumps({k: v for k, v in result.items() if k not in ("plain", "pch")}, indent=1))
    for variant in ("plain", "pch"):
        print(f"{variant}: median {result[variant]['median_wall_s']} s wall, "
              f"{result[variant]['median_cpu_s']} s CPU over {args.reps} builds; .gch used: "
              f"{result[variant]['pch_used']}")
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
