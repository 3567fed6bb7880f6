"""End-to-end: the held-out retest leg (docs/guide/heldout.md). A problem with a ``ModelMLX`` port, two torch candidates
and their MLX ports of the same name; first ``--autotune`` on the CPU, then ``--autotune --device=mlx``: each MLX
result is linked to the CPU result it retests (``retest_of``) with ``transfer_ratio`` = held-out / origin speedup,
in the JSON report, the terminal and the database row; from the run's own store or from a committed origins/
report. The CPU leg is measured once per module (``cpu_origin``); each test retests it on MLX in a folder of its
own, from a copy of its store or of its report."""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, ModuleRequest, fast_protocol_text

pytest.importorskip("mlx.core", reason="the held-out leg needs mlx (pip install 'mlx[cpu]' on Linux, mlx on macOS)")

SCHEMA = json.loads((REPO / "pytest_autotune" / "report" / "report.schema.json").read_text())

# the naive torch reference compares with a tensor of zeros, twice (the second pass changes nothing): ~3x the time
# of torch.relu on the CPU. With it done once (~1.6x), the CPU leg's CI reached down to 0.99 once in a fresh-clone
# CI run (two pairs of processes of 8 pairs in all, one with an offset of its own). The MLX reference (ModelMLX)
# does it twice too (since 2026-12-06): done once, the faithful port (a comparison with a scalar) was only
# ~1.1-1.4x faster than it, and a run of the suite beside a CPU hog read it at 0.75x [0.55, 1.61]
# (docs/results/flake-hunt.md). Which verdict an item gets is the measurement's; what the tests assert is that
# the verdict follows the numbers it reports (study/transfer.py), with effects large enough that a quiet machine
# gives both verdicts.
PROBLEM = '''
import torch
import torch.nn as nn

try:
    import mlx.core as mx
except ImportError:
    mx = None

batch_size = 64
dim = 8192


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        y = torch.maximum(x, torch.zeros_like(x))
        return torch.maximum(y, torch.zeros_like(y))


class ModelMLX:
    def __init__(self):
        pass

    def __call__(self, x):
        y = mx.maximum(x, mx.zeros_like(x))
        return mx.maximum(y, mx.zeros_like(y))


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
'''

CAND_TORCH = '''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)
'''

# the faithful MLX port of "compare with a scalar": faster there too
CAND_MLX_FAST = '''
import mlx.core as mx


class ModelNewMLX:
    def __init__(self):
        pass

    def __call__(self, x):
        return mx.maximum(x, 0.0)
'''

# an MLX port that is correct but does the reference's work twice: slower than the MLX baseline (~0.5x)
CAND_MLX_SLOW = '''
import mlx.core as mx


class ModelNewMLX:
    def __init__(self):
        pass

    def __call__(self, x):
        for _ in range(4):
            x = mx.maximum(x, mx.zeros_like(x))
        return x
'''


def write(base: Path, rel: str, text: str) -> Path:
    p = base / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)
    return p


def suite(pytester: pytest.Pytester) -> None:
    # the clean-process baseline check is loose here: on a loaded machine it can reject honest items, and these
    # tests are about the link, not that gate (tests/test_cheat_catalog.py covers it)
    (pytester.path / "protocol.toml").write_text(fast_protocol_text())
    write(pytester.path, "suite/relu.py", PROBLEM)
    write(pytester.path, "suite/candidates/relu/fast.py", CAND_TORCH)
    write(pytester.path, "suite/candidates/relu/slowport.py", CAND_TORCH)
    write(pytester.path, "suite/candidates/relu/mlx/fast.py", CAND_MLX_FAST)
    write(pytester.path, "suite/candidates/relu/mlx/slowport.py", CAND_MLX_SLOW)


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", "--problems=suite", "--autotune",
                                         "--autotune-exploratory", *args)


def report(path: Path) -> dict:
    import jsonschema

    r = json.loads(path.read_text())
    jsonschema.validate(r, SCHEMA)
    return r


def items(r: dict) -> dict:
    return {i["candidate"]: i for i in r["items"]}


def cpu_leg(pytester: pytest.Pytester, db: str, json_path: str) -> dict:
    res = run(pytester, f"--autotune-db={db}", f"--autotune-json={json_path}")
    res.assert_outcomes(passed=2)
    its = items(report(pytester.path / json_path))
    for name in ("fast", "slowport"):
        it = its[name]
        assert it["device"] == "cpu" and it["verdict"] == "accepted", it
        assert it["retest_of"] is None and "transfer" not in it["details"]
    return its


def expected_verdict(origin_ci: list, heldout_speedup: float) -> str:
    """The held-out verdict the numbers call for (study/transfer.py): certified where the origin's CI is above 1.0,
    then "transfers" at a held-out speedup of 1.0x or more. ~3x on the CPU and ~2.5x / ~0.5x on MLX give
    "transfers" for ``fast`` and "does not transfer" for ``slowport`` on a quiet machine; load moves the readings
    (the CPU origin read 3.61x [1.43, 7.40] beside a hog), never the rule."""
    if not origin_ci[0] > 1.0:
        return "origin not certified (its CI includes 1.0x)"
    return "transfers" if heldout_speedup >= 1.0 else "does not transfer"


def db_rows(path: Path) -> dict:
    conn = sqlite3.connect(path)
    conn.row_factory = sqlite3.Row
    out = {(r["device"], r["candidate"]): dict(r) for r in conn.execute("SELECT * FROM results ORDER BY id")}
    conn.close()
    return out


def verify(db: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest_autotune.cli", "verify", "--db", str(db)],
                          capture_output=True, text=True, timeout=120, check=False)


def heldout_lines(out: str) -> dict:
    """candidate -> its line of the terminal's held-out section."""
    lines = {}
    for line in out.splitlines():
        m = re.match(r"\s+relu/(\w+): origin .* on cpu -> .* here, transfer ratio [0-9.]+: ", line)
        if m:
            lines[m.group(1)] = line
    return lines


@pytest.fixture(scope="module")
def cpu_origin(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest):
    """The CPU leg, measured once for both tests: its folder (r.db, cpu.json) and its items."""
    mp = pytest.MonkeyPatch()
    try:
        pt = pytest.Pytester(ModuleRequest(request), tmp_path_factory, mp, _ispytest=True)  # type: ignore[arg-type]
        suite(pt)
        its = cpu_leg(pt, "r.db", "cpu.json")
        yield pt.path, its
    finally:
        mp.undo()


def copy_store(src: Path, dst: Path) -> None:
    with sqlite3.connect(src) as a, sqlite3.connect(dst) as b:
        a.backup(b)
    a.close()
    b.close()


def test_mlx_results_link_to_the_cpu_results_of_the_same_store(pytester: pytest.Pytester, cpu_origin):
    origin, cpu = cpu_origin
    suite(pytester)
    copy_store(origin / "r.db", pytester.path / "r.db")

    res = run(pytester, "--device=mlx", "--autotune-db=r.db", "--autotune-json=mlx.json")
    out = res.stdout.str()
    res.assert_outcomes(passed=2)
    mlx = items(report(pytester.path / "mlx.json"))
    rows = db_rows(pytester.path / "r.db")
    for name in ("fast", "slowport"):
        origin_row = rows[("cpu", name)]
        it = mlx[name]
        t = it["details"]["transfer"]
        assert it["device"] == "mlx" and it["verdict"] == "accepted"
        assert t["retest_of"] == f"results:{origin_row['id']}"
        assert t["origin_device"] == "cpu" and t["origin_speedup"] == cpu[name]["speedup"] == origin_row["speedup"]
        assert t["origin_ci"] == cpu[name]["ci"]
        assert t["heldout_speedup"] == it["speedup"]
        assert t["transfer_ratio"] == pytest.approx(it["speedup"] / cpu[name]["speedup"], rel=1e-12)
        assert (it["retest_of"], it["transfer_ratio"]) == (t["retest_of"], t["transfer_ratio"])
        # the database row carries the same link (and the validator checked it: retest_link)
        row = rows[("mlx", name)]
        assert row["retest_of"] == t["retest_of"]
        assert row["transfer_ratio"] == pytest.approx(t["transfer_ratio"], rel=1e-12)
        assert row["speedup"] == it["speedup"]
    # the slow port reads below 1.0x on the held-out device on a quiet machine: a certified origin that does not
    # transfer; each verdict, in the report and the terminal, is the one its numbers call for
    assert "held-out retest on mlx (baseline re-derived here" in out
    lines = heldout_lines(out)
    for name in ("fast", "slowport"):
        verdict = expected_verdict(cpu[name]["ci"], mlx[name]["speedup"])
        assert mlx[name]["details"]["transfer"]["verdict"] == verdict, (mlx[name], cpu[name])
        assert lines[name].rstrip().endswith(f": {verdict}  [results:{rows[('cpu', name)]['id']}]"), lines[name]
    ratio = f"transfer ratio {mlx['fast']['details']['transfer']['transfer_ratio']:.2f}"
    assert ratio in lines["fast"]
    v = verify(pytester.path / "r.db")
    assert v.returncode == 0, v.stdout + v.stderr


def test_mlx_results_link_to_a_committed_origin_report(pytester: pytest.Pytester, cpu_origin):
    """A clean checkout has no store rows: the origin comes from <suite>/origins/*.json."""
    origin, _ = cpu_origin
    suite(pytester)
    (pytester.path / "suite" / "origins").mkdir()
    shutil.copy(origin / "cpu.json", pytester.path / "suite" / "origins" / "cpu-test.json")
    cpu_report = json.loads((origin / "cpu.json").read_text())
    cpu = items(cpu_report)
    run_id = cpu_report["run"]["run_id"]

    res = run(pytester, "--device=mlx", "--autotune-db=fresh.db", "--autotune-json=mlx.json")
    res.assert_outcomes(passed=2)
    mlx = items(report(pytester.path / "mlx.json"))
    rows = db_rows(pytester.path / "fresh.db")
    assert {k[0] for k in rows} == {"mlx"}  # nothing from the CPU leg in this store
    for name in ("fast", "slowport"):
        t = mlx[name]["details"]["transfer"]
        assert t["retest_of"] == f"report:cpu-test.json#{run_id}/{cpu[name]['nodeid']}"
        assert t["origin_speedup"] == cpu[name]["speedup"] and t["origin_run_id"] == run_id
        assert t["transfer_ratio"] == pytest.approx(mlx[name]["speedup"] / cpu[name]["speedup"], rel=1e-12)
        assert rows[("mlx", name)]["retest_of"] == t["retest_of"]
        assert rows[("mlx", name)]["transfer_ratio"] == pytest.approx(t["transfer_ratio"], rel=1e-12)
    out = res.stdout.str()
    for name in ("fast", "slowport"):
        verdict = expected_verdict(cpu[name]["ci"], mlx[name]["speedup"])
        assert f": {verdict}  [report:cpu-test.json#" in heldout_lines(out)[name], heldout_lines(out)
    v = verify(pytester.path / "fresh.db")
    assert v.returncode == 0, v.stdout + v.stderr
