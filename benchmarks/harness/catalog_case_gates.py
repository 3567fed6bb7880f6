"""Which gate refuses one cheat of the catalog, over fresh sessions (docs/design/protocol.md#derived-input-sets): the
catalog's test asserts the gate that names a cheat's defence, and an earlier gate refusing it first (a probe seed
that happens to catch it) fails that test on a correct program. This runs the cheat alone, each session with the
catalog's own protocol for its session and a fresh probe seed (or the one given), and counts verdicts by gate.

    python3 benchmarks/harness/catalog_case_gates.py softmax_rows/cheat_cache_signs 20
    python3 benchmarks/harness/catalog_case_gates.py softmax_rows/cheat_cache_signs 1 --probe-seed 675204992724960297
"""

from __future__ import annotations

import argparse
import collections
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))

from test_cheat_catalog import CATALOG, SESSION_PROTOCOL  # noqa: E402

from conftest import fast_protocol_text  # noqa: E402


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("case", help="PROBLEM/CANDIDATE of a case in tests/test_cheat_catalog.py CATALOG")
    ap.add_argument("sessions", nargs="?", type=int, default=10)
    ap.add_argument("--session", default="main", help="the catalog session whose protocol to use (default main)")
    ap.add_argument("--probe-seed", type=int, help="replay one probe seed instead of a fresh one per session")
    a = ap.parse_args(argv)
    problem, _, name = a.case.partition("/")
    case = next((c for c in CATALOG if (c.problem, c.name, c.session) == (problem, name, a.session)), None)
    if case is None:
        ap.error(f"no case {a.case!r} in session {a.session!r} of tests/test_cheat_catalog.py CATALOG")
    counts: collections.Counter = collections.Counter()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        shutil.copytree(REPO / "tests/cheats/problems", root / "problems")
        (root / "candidates" / problem).mkdir(parents=True)
        shutil.copy(case.path, root / "candidates" / problem / f"{name}.py")
        (root / "protocol.toml").write_text(fast_protocol_text(**SESSION_PROTOCOL[a.session]))
        for i in range(a.sessions):
            report = root / f"report-{i}.json"
            cmd = [sys.executable, "-m", "pytest", "--autotune", "--autotune-exploratory", "--problems", "problems",
                   "--candidates", "candidates", "--autotune-json", str(report), "-p", "no:cacheprovider", "-q",
                   "--autotune-db", str(root / f"results-{i}.db")]
            if a.probe_seed is not None:
                cmd.append(f"--autotune-probe-seed={a.probe_seed}")
            subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=600)
            items = json.loads(report.read_text())["items"] if report.exists() else []
            it = items[0] if items else {"verdict": "no report", "gate": None, "reason": ""}
            key = f"{it['verdict']} ({it.get('gate')})"
            counts[key] += 1
            print(f"session {i + 1}: {key} {str(it.get('reason') or '')[:100]}", flush=True)
    print(f"{a.case}, {a.sessions} session(s): " + ", ".join(f"{k}: {v}" for k, v in counts.most_common())
          + f"; the catalog expects {case.verdicts} by {case.gates or 'any gate'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
