"""Run an engine session under a protocol variant (docs/results/engines.md).

The shipped protocol fixes how many launch pairs and windows an engine item measures. To study other choices
(more launch pairs, more windows, an A/A run), this script builds a scratch rootdir holding the repository's
protocol.toml with ``--set section.key=value`` overrides (recorded as exploratory: the digest is not pinned) and
the engine's declaration file, runs ``pytest --autotune`` there, and leaves the JSON report where ``--json`` says.
Read the reports with ``benchmarks/harness/engine_noise.py``.

    python benchmarks/harness/engine_session.py --engine vllm --aa -k "aa and short" \\
        --set engines.launch_pairs=4 --set engines.windows_per_launch=8 --json /tmp/vllm-aa-1.json
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def with_overrides(text: str, overrides: dict[str, str]) -> str:
    section = ""
    out = []
    left = dict(overrides)
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("[") and s.endswith("]"):
            section = s.strip("[]")
        m = re.match(r"([A-Za-z_][A-Za-z0-9_]*)\s*=", s)
        if m and f"{section}.{m.group(1)}" in left:
            out.append(f"{m.group(1)} = {left.pop(f'{section}.{m.group(1)}')}")
            continue
        out.append(line)
    if left:
        raise SystemExit(f"unknown protocol keys: {sorted(left)}")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--engine", required=True, help="declaration benchmarks/engines/<engine>.toml")
    ap.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE")
    ap.add_argument("--aa", action="store_true", help="add the A/A items (--autotune-aa)")
    ap.add_argument("-k", default=None)
    ap.add_argument("--json", required=True, type=Path)
    ap.add_argument("--db", type=Path, default=None)
    args = ap.parse_args(argv)
    overrides = dict(s.split("=", 1) for s in args.set)
    work = Path(tempfile.mkdtemp(prefix="engine-session-"))
    try:
        (work / "benchmarks" / "engines").mkdir(parents=True)
        shutil.copy(REPO / "benchmarks" / "engines" / f"{args.engine}.toml", work / "benchmarks" / "engines")
        (work / "protocol.toml").write_text(with_overrides((REPO / "protocol.toml").read_text(), overrides))
        cmd = [sys.executable, "-m", "pytest", "--autotune", "benchmarks/engines", "-p", "no:cacheprovider",
               f"--autotune-json={args.json.resolve()}", "-rA"]
        if overrides:
            cmd.append("--autotune-exploratory")
        if args.aa:
            cmd.append("--autotune-aa")
        if args.k:
            cmd += ["-k", args.k]
        if args.db:
            cmd.append(f"--autotune-db={args.db.resolve()}")
        print(" ".join(cmd), f"(in {work})", flush=True)
        return subprocess.call(cmd, cwd=work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
