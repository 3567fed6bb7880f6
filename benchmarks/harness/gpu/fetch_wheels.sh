#!/usr/bin/env bash
# Every wheel the GPU host lacks, into .whl/: run it where pip reaches PyPI, then copy `.whl/` to the GPU host with
# the repository; run_h200.sh and anchors_h200.sh install them from there.
#
#   bash benchmarks/harness/gpu/fetch_wheels.sh
#
# The host (Python 3.12.3, torch 2.11, triton 3.6, numpy, pytest, hypothesis, xdist, click, tabulate, dateutil,
# pluggy: the host's own package list) lacks:
#   sqlite-utils (the store) and its needs sqlite-fts4 and click-default-group, with click >= 8.3.1 to be sure;
#   pyseccomp: the seccomp bindings the jail's filter is built with (libseccomp.so.2 itself is on the host);
#   nvidia-ml-py (pynvml): the helper watch's view of GPU processes (the image lists it; copied along so the run does
#   not depend on that), the 580 branch like the host's driver (580.159.04).
# Binary wheels only, for CPython 3.12 on manylinux x86-64, no dependency resolution (each need is named here and
# checked below). One version of each: two stop the install.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
WHEELS=(
  sqlite-utils==4.2.1 sqlite-fts4==1.0.3 click-default-group==1.2.4 click==8.5.1
  pyseccomp==0.1.2
  nvidia-ml-py==13.580.126
)
# what the host already has (its package list): a wheel's need that is neither copied along nor here fails the check
HOST_HAS="pluggy python-dateutil tabulate pip six numpy torch pytest hypothesis pytest-xdist execnet triton setuptools
typing-extensions filelock sympy networkx jinja2 fsspec attrs sortedcontainers packaging iniconfig"
rm -rf .whl
mkdir -p .whl
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl "${WHEELS[@]}"
python3 - "$HOST_HAS" <<'PY'
import re, sys, zipfile
from pathlib import Path

norm = lambda s: re.sub(r"[-_.]+", "-", s).lower()
wheels = sorted(Path(".whl").glob("*.whl"))
carried = {norm(w.name.split("-")[0]) for w in wheels}
host = {norm(n) for n in sys.argv[1].split()}
missing = []
for w in wheels:
    with zipfile.ZipFile(w) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        for line in z.read(meta).decode().splitlines():
            if line.startswith("Requires-Dist:") and "extra ==" not in line:
                need = norm(re.split(r"[ ;<>=!~(\[]", line.split(":", 1)[1].strip())[0])
                if need not in carried and need not in host:
                    missing.append(f"{w.name} needs {need}")
names = [norm(w.name.split("-")[0]) for w in wheels]
dupes = {n for n in names if names.count(n) > 1}
total = sum(w.stat().st_size for w in wheels)
print(f"{len(wheels)} wheels, {total / 2**20:.2f} MiB: " + ", ".join(w.name for w in wheels))
if missing or dupes or total > 16 * 2**20:
    sys.exit(f"NOT RESOLVED: missing {missing}, two versions of {sorted(dupes)}, {total / 2**20:.1f} MiB (limit 16)")
PY
# the host's own install step, tried here: every carried module imports from the target folder alone
rm -rf /tmp/fetch-wheels-site
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/fetch-wheels-site .whl/*.whl
PYTHONPATH=/tmp/fetch-wheels-site python3 -c "import sqlite_utils, sqlite_fts4, click_default_group, click, pyseccomp, pynvml; print('imports ok:', sqlite_utils.__file__.split('/')[2], pyseccomp.__name__, pynvml.__name__)"
rm -rf /tmp/fetch-wheels-site
