"""End-to-end tests of the plugin through pytester: a fresh pytest process per measuring run; the sessions that
time nothing (usage errors, collection, correctness only) run in this process (``runpytest``, tests/conftest.py)."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import e2e_files as F
import pytest

from conftest import REPO, ModuleRequest, fast_protocol_text

SCHEMA = json.loads((REPO / "pytest_autotune" / "report" / "report.schema.json").read_text())


def write(base: Path, rel: str, text: str) -> Path:
    p = base / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)
    return p


def report(path: Path) -> dict:
    import jsonschema

    r = json.loads(path.read_text())
    jsonschema.validate(r, SCHEMA)
    return r


def by_candidate(r: dict) -> dict:
    return {(i["problem"], i["candidate"]): i for i in r["items"]}


def fast(pytester: pytest.Pytester, **overrides: str) -> None:
    (pytester.path / "protocol.toml").write_text(fast_protocol_text(**overrides))


def module_pytester(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest,
                    mp: pytest.MonkeyPatch) -> pytest.Pytester:
    """A Pytester of its own folder for a module-scoped session (tests/conftest.py ``ModuleRequest``)."""
    return pytest.Pytester(ModuleRequest(request), tmp_path_factory, mp, _ispytest=True)  # type: ignore[arg-type]


# Two module-scoped measuring sessions, each read by several tests below. Each used to be one fresh session per
# test (~5-10 s each on 2 cores before its first item); the tests that share one use the same files and protocol.
# Each still runs in a fresh process (``runpytest_subprocess``): the controller never times in this one.

SURFACE_GITIGNORE = "runpytest-*\nstdout\nstderr\n.autotune/\n__pycache__/\nr.json\n"


@pytest.fixture(scope="module")
def relu_session(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest):
    """An honest ReLU candidate, an identity on non-negative inputs and a bf16 downgrade, under the fast (unfrozen)
    protocol with the suite's candidates in the modification surface, committed to git; then the honest candidate
    is edited (inside the surface) and the session measures with ``--autotune-exploratory --autotune-base=HEAD``.
    Read by test_unfrozen_protocol_refuses_to_record_unless_exploratory (the exploratory run records),
    test_identity_relu_and_bf16_downgrade_are_not_accepted (probe and correctness refusals) and
    test_modification_surface_is_enforced (a change to a candidate only is allowed)."""
    mp = pytest.MonkeyPatch()
    try:
        pt = module_pytester(tmp_path_factory, request, mp)
        write(pt.path, "suite/relu.py", F.RELU)
        write(pt.path, "suite/candidates/relu/clamp.py", F.CAND_RELU_CLAMP)
        write(pt.path, "suite/candidates/relu/bf16.py", F.CAND_RELU_BF16)
        write(pt.path, "suite/relu_nonneg.py", F.RELU_NONNEG)
        write(pt.path, "suite/candidates/relu_nonneg/identity.py", F.CAND_IDENTITY)
        # up to four pairs of processes on a budget the first two always overrun: exactly two run. Each gets 12
        # pairs of samples: the wall-clock rule compares the arms over at least 12 samples each (gates/clocks.py
        # MIN_COMPARED); with the fast protocol's 8 pairs in all, 4 per pair of processes, its bootstrapped noise
        # over 4 samples read 202 us once, and refused the honest clamp for 271 us (2 of 15 runs)
        fast(pt, **{"timing.item_budget_s": "0.001", "timing.process_pairs": "4", "timing.min_pairs": "24",
                    "engines.windows_per_launch": "12"})
        (pt.path / "protocol.toml").write_text(
            (pt.path / "protocol.toml").read_text().replace('"candidates/**",', '"candidates/**",\n  "suite/candidates/**",'))
        (pt.path / ".gitignore").write_text(SURFACE_GITIGNORE)
        git = ["git", "-c", "user.email=t@t", "-c", "user.name=t"]
        subprocess.run(git + ["init", "-q"], cwd=pt.path, check=True)
        subprocess.run(git + ["add", "-A"], cwd=pt.path, check=True)
        subprocess.run(git + ["commit", "-qm", "base"], cwd=pt.path, check=True)
        # a change to the candidate only: allowed
        write(pt.path, "suite/candidates/relu/clamp.py", F.CAND_RELU_CLAMP + "\n# tuned\n")
        res = pt.runpytest_subprocess("--problems=suite", "--autotune", "--autotune-exploratory",
                                      "--autotune-base=HEAD", "--autotune-json=r.json")
        yield pt, res
    finally:
        mp.undo()


@pytest.fixture(scope="module")
def softmax_session(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> dict:
    """Softmax with a declared baseline faster than its naive reference, a candidate identical to that baseline, and
    ``--autotune-aa``'s reference against itself; three pairs of processes per item (``--autotune-pairs=3``; the
    protocol's two otherwise), and a CI target no item reaches (0.1%). Read by test_aa_item_reads_about_one,
    test_strongest_declared_baseline_is_used_and_strawman_is_shown and test_one_precision_line_and_autotune_pairs
    (the terminal output is under ``"stdout"``, the report's run and summary under ``"run"`` and ``"summary"``)."""
    mp = pytest.MonkeyPatch()
    try:
        pt = module_pytester(tmp_path_factory, request, mp)
        write(pt.path, "suite/softmax.py", F.SOFTMAX)
        write(pt.path, "suite/baselines/softmax/previous_best.py", F.CAND_SOFTMAX)
        write(pt.path, "suite/candidates/softmax/same_as_best.py", F.CAND_SOFTMAX)
        fast(pt, **{"timing.item_budget_s": "2.0", "timing.process_pairs": "2",
                    "statistics.ci_target_rel_width": "0.001"})
        res = pt.runpytest_subprocess("--problems=suite", "--autotune", "--autotune-exploratory", "--autotune-aa",
                                      "--autotune-pairs=3", "--autotune-json=r.json")
        path = pt.path / "r.json"
        assert path.exists(), res.stdout.str()[-3000:] + res.stderr.str()[-3000:]
        r = report(path)
        yield {**by_candidate(r), "stdout": res.stdout.str(), "run": r["run"], "summary": r["summary"]}
    finally:
        mp.undo()


# --------------------------------------------------------------------------------------- collection


def test_items_have_readable_ids_and_respect_k_and_help(pytester: pytest.Pytester):
    write(pytester.path, "suite/relu.py", F.RELU)
    write(pytester.path, "suite/softmax.py", F.SOFTMAX)
    write(pytester.path, "suite/candidates/relu/clamp.py", F.CAND_RELU_CLAMP)
    write(pytester.path, "suite/candidates/softmax/fused.py", F.CAND_SOFTMAX)
    write(pytester.path, "more/relu/other.py", F.CAND_RELU_CLAMP)
    res = pytester.runpytest("--problems=suite", "--candidates=more", "--co", "-q")
    out = res.stdout.str()
    assert "suite/relu.py::clamp[cpu]" in out
    assert "suite/relu.py::other[cpu]" in out
    assert "suite/softmax.py::fused[cpu]" in out
    res = pytester.runpytest("--problems=suite", "--candidates=more", "-k", "softmax", "--co", "-q")
    assert "softmax.py::fused[cpu]" in res.stdout.str() and "clamp" not in res.stdout.str()
    help_text = pytester.runpytest("--help").stdout.str()
    for opt in ("--autotune", "--device=NAME", "--autotune-db=PATH", "--autotune-json=PATH", "--problems=DIR",
                "--candidates=DIR", "--autotune-exploratory", "--autotune-base=REF", "--autotune-probe-seed=N"):
        assert opt in help_text, opt


#: a conftest that counts, when the first item is set up, this process's children that are sandbox zygotes
ZYGOTE_PROBE = '''
import os, pathlib

def pytest_runtest_setup(item):
    out = pathlib.Path("zygotes_at_first_setup.txt")
    if out.exists():
        return
    n = 0
    for e in os.listdir("/proc"):
        try:
            with open(f"/proc/{e}/stat") as f:
                stat = f.read()
            with open(f"/proc/{e}/cmdline", "rb") as f:
                cmd = f.read()
        except (OSError, ValueError):
            continue
        if int(stat[stat.rfind(")") + 2:].split()[1]) == os.getpid() and b"sandbox.zygote" in cmd:
            n += 1
    out.write_text(str(n))
'''


def test_correctness_only_run_passes_and_records_nothing(pytester: pytest.Pytester):
    """... and the sandboxes' zygote is already starting when the first item is set up (it was launched when
    collection ended, so it imports torch while the controller gets the item ready)."""
    write(pytester.path, "suite/relu.py", F.RELU)
    write(pytester.path, "suite/candidates/relu/clamp.py", F.CAND_RELU_CLAMP)
    write(pytester.path, "suite/candidates/relu/bf16.py", F.CAND_RELU_BF16)
    write(pytester.path, "conftest.py", ZYGOTE_PROBE)
    res = pytester.runpytest("--problems=suite", "--autotune-json=r.json")
    res.assert_outcomes(passed=1, failed=1)
    if sys.platform.startswith("linux"):
        assert (pytester.path / "zygotes_at_first_setup.txt").read_text() == "1"
    assert not (pytester.path / ".autotune").exists()
    items = by_candidate(report(pytester.path / "r.json"))
    assert items[("relu", "clamp")]["verdict"] == "accepted" and items[("relu", "clamp")]["speedup"] is None
    bf16 = items[("relu", "bf16")]
    assert bf16["verdict"] == "rejected" and bf16["gate"] == "correctness"
    assert "less accurate than the reference against the float64 oracle" in bf16["reason"]


def test_bad_files_fail_one_item_each_and_never_abort_collection(pytester: pytest.Pytester):
    write(pytester.path, "suite/a_syntax.py", F.BAD_SYNTAX)
    write(pytester.path, "suite/b_no_model.py", F.NO_MODEL)
    write(pytester.path, "suite/c_inputs_raise.py", F.INPUTS_RAISE)
    write(pytester.path, "suite/candidates/c_inputs_raise/clamp.py", F.CAND_RELU_CLAMP)
    write(pytester.path, "suite/relu.py", F.RELU)
    write(pytester.path, "suite/candidates/relu/clamp.py", F.CAND_RELU_CLAMP)
    write(pytester.path, "suite/candidates/relu/no_modelnew.py", F.CAND_NO_MODELNEW)
    write(pytester.path, "suite/candidates/relu/returns_list.py", F.CAND_RETURNS_LIST)
    write(pytester.path, "suite/candidates/relu/syntax.py", F.BAD_SYNTAX)
    write(pytester.path, "suite/linear.py", F.LINEAR)
    write(pytester.path, "suite/candidates/linear/addmm.py", F.CAND_LINEAR)
    write(pytester.path, "suite/candidates/linear/bad_signature.py", F.CAND_BAD_SIGNATURE)
    res = pytester.runpytest("--problems=suite", "--autotune-json=r.json")
    res.assert_outcomes(passed=2, failed=7)
    out = res.stdout.str()
    assert "a_syntax.py: syntax error at line 2" in out
    assert "missing Model" in out
    items = by_candidate(report(pytester.path / "r.json"))
    assert items[("relu", "clamp")]["verdict"] == "accepted"
    assert items[("linear", "addmm")]["verdict"] == "accepted"
    assert "defines no class ModelNew" in items[("relu", "no_modelnew")]["reason"]
    assert "not a tensor" in items[("relu", "returns_list")]["reason"]
    assert "syntax error" in items[("relu", "syntax")]["reason"]
    assert "get_init_inputs() (2 args)" in items[("linear", "bad_signature")]["reason"]
    assert "get_inputs() raised ValueError: broken inputs" in out


def test_x_stops_at_the_first_failure_and_junitxml_carries_the_verdict(pytester: pytest.Pytester):
    write(pytester.path, "suite/a_bad.py", F.BAD_SYNTAX)
    write(pytester.path, "suite/relu.py", F.RELU)
    write(pytester.path, "suite/candidates/relu/clamp.py", F.CAND_RELU_CLAMP)
    res = pytester.runpytest("--problems=suite", "-x", "--junitxml=j.xml")
    res.assert_outcomes(failed=1)
    res = pytester.runpytest("--problems=suite", "--junitxml=j.xml")
    xml = (pytester.path / "j.xml").read_text()
    assert 'name="autotune_verdict" value="accepted"' in xml
    assert 'name="autotune_gate" value="load"' in xml


# --------------------------------------------------------------------------------------- configuration errors


def test_unavailable_or_unknown_devices_are_refused_before_collection(pytester: pytest.Pytester):
    write(pytester.path, "suite/relu.py", F.RELU)
    res = pytester.runpytest("--problems=suite", "--device=tpu")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    assert "--device=tpu is not a known device" in res.stderr.str()
    import torch

    if not torch.cuda.is_available():
        res = pytester.runpytest("--problems=suite", "--device=cuda")
        assert res.ret == pytest.ExitCode.USAGE_ERROR
        assert "sees no CUDA GPU" in res.stderr.str()
    # an mlx whose import raises, first on sys.path (the real one, if this process imported it, is set aside for
    # the session and put back after): refused before collection, in this process (nothing timed)
    fake = write(pytester.path, "fakemods/mlx/__init__.py", "raise ImportError('mlx is broken here')\n")
    with pytest.MonkeyPatch.context() as mp:
        for name in [m for m in sys.modules if m == "mlx" or m.startswith("mlx.")]:
            mp.delitem(sys.modules, name)
        mp.syspath_prepend(str(fake.parent.parent))
        res = pytester.runpytest("--problems=suite", "--device=mlx")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    assert "mlx package is not importable" in res.stderr.str() and "mlx is broken here" in res.stderr.str()
    assert "pip install" in res.stderr.str()
    assert "collected" not in res.stdout.str()


def test_unfrozen_protocol_refuses_to_record_unless_exploratory(pytester: pytest.Pytester, relu_session):
    write(pytester.path, "suite/relu.py", F.RELU)
    write(pytester.path, "suite/candidates/relu/clamp.py", F.CAND_RELU_CLAMP)
    fast(pytester)
    res = pytester.runpytest("--problems=suite", "--autotune")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    assert "changed without a version bump" in res.stderr.str()
    assert not (pytester.path / ".autotune" / "results.db").exists()
    # with --autotune-exploratory it records, marked exploratory: the module's session (its protocol is the fast one,
    # unfrozen as here), whose one accepted item is the honest ReLU
    session, res = relu_session
    outcomes = res.parseoutcomes()
    assert outcomes.get("passed") == 1, res.stdout.str()[-3000:]
    con = sqlite3.connect(session.path / ".autotune" / "results.db")
    assert con.execute("select exploratory from results").fetchall() == [(1,)]
    assert con.execute("select protocol_frozen, exploratory from runs").fetchall() == [(0, 1)]
    # of up to four pairs of processes, the two every item gets ran (each its share of min_pairs, 8 in all: the
    # database's floor), and no third started past the spent budget
    n_pairs, = con.execute("select n_pairs from results").fetchone()
    con.close()
    clamp = by_candidate(report(session.path / "r.json"))[("relu", "clamp")]
    pairs = clamp["details"]["timing"]["calibration"]["process_pairs"]
    assert len(pairs) == 2 and sum(p["n_pairs"] for p in pairs) == n_pairs >= 8, pairs
    assert clamp["reason"].startswith("2 pairs of processes of 4 (the item budget was spent"), clamp["reason"]


def test_unusable_database_is_refused_and_left_untouched(pytester: pytest.Pytester):
    write(pytester.path, "suite/relu.py", F.RELU)
    db = pytester.path / ".autotune" / "results.db"
    db.parent.mkdir()
    garbage = b"this is not a database" * 100
    db.write_bytes(garbage)
    res = pytester.runpytest("--problems=suite", "--autotune")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    assert str(db) in res.stderr.str()
    assert db.read_bytes() == garbage


# --------------------------------------------------------------------------------------- measuring


def test_full_run_from_any_directory_writes_a_valid_report_and_a_verifiable_db(pytester: pytest.Pytester):
    """`pytest --autotune --problems X --candidates Y --autotune-json r.json` works from anywhere,
    with the packaged (frozen) protocol."""
    write(pytester.path, "X/linear.py", F.LINEAR)
    write(pytester.path, "Y/linear/addmm.py", F.CAND_LINEAR)
    elsewhere = pytester.path / "somewhere" / "else"
    elsewhere.mkdir(parents=True)
    res = subprocess.run(
        [sys.executable, "-m", "pytest", "--autotune", "--problems", "../../X", "--candidates", "../../Y",
         "--autotune-json", "r.json", "-p", "no:cacheprovider"],
        cwd=elsewhere, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
    r = report(elsewhere / "r.json")
    assert r["run"]["protocol_frozen"] in (True, 1)
    (item,) = r["items"]
    assert item["verdict"] == "accepted" and item["ci"][0] <= item["speedup"] <= item["ci"][1]
    assert item["n_pairs"] >= 12 and item["baseline"] == "reference"
    assert "speedup [95% CI]" in res.stdout and "linear" in res.stdout
    db = Path(r["run"]["db"])
    assert db.is_file() and db.name == "results.db"
    verify = subprocess.run([sys.executable, "-m", "pytest_autotune.cli", "verify", "--db", str(db)],
                            capture_output=True, text=True)
    assert verify.returncode == 0, verify.stdout + verify.stderr


def test_identity_relu_and_bf16_downgrade_are_not_accepted(pytester: pytest.Pytester, relu_session):
    """A ReLU that returns its input on non-negative inputs is stopped (probe, or breaker without
    probes); a bf16 downgrade is rejected by correctness."""
    session, _ = relu_session  # the fast protocol, probes on
    items = by_candidate(report(session.path / "r.json"))
    ident = items[("relu_nonneg", "identity")]
    assert ident["verdict"] == "rejected" and ident["gate"] == "probe", ident
    assert "--autotune-probe-seed=" in ident["reason"]
    assert any("weak problem" in w for w in ident["warnings"]) or ident["verdict"] == "rejected"
    assert items[("relu", "bf16")]["gate"] == "correctness", items[("relu", "bf16")]
    assert "speedup" not in json.dumps(items[("relu", "bf16")]["details"].get("stage_seconds", {}))
    write(pytester.path, "suite/relu_nonneg.py", F.RELU_NONNEG)
    write(pytester.path, "suite/candidates/relu_nonneg/identity.py", F.CAND_IDENTITY)
    write(pytester.path, "suite/relu.py", F.RELU)
    write(pytester.path, "suite/candidates/relu/bf16.py", F.CAND_RELU_BF16)
    # without probes, the 10x breaker is what stops the identity
    # more rounds than the fast default, so a preempted round on a busy machine cannot decide the verdict
    fast(pytester, **{"probes.max_examples": "0", "probes.shape_examples": "0", "timing.min_pairs": "16",
                      "timing.item_budget_s": "1.0"})
    res = pytester.runpytest_subprocess("--problems=suite", "--autotune", "--autotune-exploratory",
                                        "--autotune-json=r2.json", "-k", "identity")
    ident = by_candidate(report(pytester.path / "r2.json"))[("relu_nonneg", "identity")]
    assert ident["verdict"] == "quarantined" and ident["gate"] == "breaker", ident
    assert "QUARANTINED" in ident["reason"] and "> 10x breaker" in ident["reason"]
    assert "QUARANTINED" in res.stdout.str()
    con = sqlite3.connect(pytester.path / ".autotune" / "results.db")
    assert con.execute("select count(*) from results where candidate='identity'").fetchone() == (0,)
    assert con.execute("select count(*) from quarantine where candidate='identity'").fetchone() == (1,)


def test_aa_item_reads_about_one(softmax_session: dict):
    """The reference against itself, in three pairs of processes (``--autotune-pairs=3``: all three run, each with
    one pair's budget of the protocol), and against the reference even where a faster baseline is declared (an A/A
    against the strongest baseline would be a comparison)."""
    aa = softmax_session[("softmax", "reference-aa")]
    assert aa["candidate"] == "reference-aa" and aa["verdict"] == "accepted", aa["reason"]
    assert aa["baseline"] == "reference" and aa["strawman_speedup"] == aa["speedup"]
    # paired A/A: a statistical bound. Every A/A item measured on the 2-vCPU VM read within |log| 8.6% of 1.0
    # (docs/results/cpu.md; the largest offset of one pair of processes seen, kb26_gelu's 0.903, is -10%); 1.5x and
    # 0.67x are |log| 40%, four times the worst pair's offset and over 10 sd of the 2.5% the protocol states
    # for one pair (three pairs here): under a normal model a false failure is below 1e-20 a run, and load that
    # slows both arms alike moves a paired ratio little (CPU hogs in docs/results/flake-hunt.md)
    assert 0.67 < aa["speedup"] < 1.5
    pairs = aa["details"]["timing"]["calibration"]["process_pairs"]
    assert len(pairs) == 3 and sum(p["n_pairs"] for p in pairs) == aa["n_pairs"] >= 8
    assert aa["reason"].startswith("3 pairs of processes (")
    assert {"candidate (timing)", "baseline-p0", "candidate (timing)-p1", "baseline-p1", "baseline-p2"} <= set(
        aa["details"]["wire"])


def test_one_precision_line_and_autotune_pairs(softmax_session: dict):
    """No item reaches the 0.1% CI target: the terminal says so once, in one line naming the pairs of processes
    that would (``--autotune-max-pairs``; docs/guide/precision.md), and no item warns about its own CI; the JSON keeps each item's numbers
    (details.precision) and the summary's. --autotune-pairs is in the run's provenance and each row's."""
    out = softmax_session["stdout"]
    lines = [ln for ln in out.splitlines() if ln.startswith("precision: ")]
    assert len(lines) == 1, out[-3000:]
    assert lines[0].startswith("precision: 0 of 2 item(s) reached the 0.1% CI target"), lines[0]
    assert "3 pair(s) of processes an item" in lines[0] and "--autotune-max-pairs=" in lines[0]
    assert "CI target not reached" not in out and "see warnings" not in out
    summary = softmax_session["summary"]["precision"]
    assert summary["line"] == lines[0] and summary["reached"] == 0 and summary["suggested"] > 3
    for key in (("softmax", "reference-aa"), ("softmax", "same_as_best")):
        item = softmax_session[key]
        p = item["details"]["precision"]
        # no warning of its own about its CI (until f6c8c6e each item warned "CI target not reached"); the item may
        # carry others that load brings: the wall-clock rule's "the machine was loaded while this item was timed",
        # which a run on the 2-vCPU VM with other work on both CPUs gave (2026-12-06, docs/results/flake-hunt.md)
        assert p["met"] is False and item["ci_target_met"] is False
        assert not [w for w in item["warnings"] if "CI" in w or "target" in w], item["warnings"]
        assert p["pairs_of_processes"] == p["planned"] == 3 and len(p["pair_log_speedups"]) == 3
        assert p["ci_rel_width"] == pytest.approx((item["ci"][1] - item["ci"][0]) / item["speedup"])
    assert softmax_session["run"]["provenance"]["process_pairs"] == 3


def test_max_pairs_stops_each_item_at_its_target(pytester: pytest.Pytester):
    """--autotune-max-pairs=N: an item adds pairs of processes until the protocol's CI reaches the target, at most N.
    A target every CI meets stops the item at the protocol's own two pairs, and its reason says why; a target none
    meets runs all N. The run's provenance records N; --autotune-pairs beside it is a usage error naming the fix.

    Both targets hold for any timing, so the pairs each run stops at are certain. The loose one is a width of 100
    (10000%): the rule's cheap width of two pairs (measure/until_target.py) passes it unless their log speedups
    differ by more than 2 asinh(50) / 1.96 = 4.7 (their speedups by over 100x), and the protocol's CI (a bootstrap
    of the pairs' ratios, widened by the offset term) only where they span more than 100x. A target of 0.9, used until 2026-12-06, was not one every CI
    meets: on the 2-vCPU VM a loaded run's two pairs read far enough apart that the item went on to 3 pairs (of
    5). The tight one, 0.0001, is below what the protocol's offset term alone allows with 3 pairs
    (2 sinh(1.96 x 0.025 / sqrt(3)) = 5.7%)."""
    write(pytester.path, "suite/relu.py", F.RELU)
    write(pytester.path, "suite/candidates/relu/clamp.py", F.CAND_RELU_CLAMP)
    runs = {}
    for name, target, cap in (("loose", "100", 5), ("tight", "0.0001", 3)):
        fast(pytester, **{"timing.item_budget_s": "0.4", "timing.process_pairs": "2",
                          "statistics.ci_target_rel_width": target})
        res = pytester.runpytest_subprocess("--problems=suite", "--autotune", "--autotune-exploratory",
                                            f"--autotune-max-pairs={cap}", f"--autotune-json={name}.json")
        path = pytester.path / f"{name}.json"
        assert path.exists(), res.stdout.str()[-3000:] + res.stderr.str()[-3000:]
        runs[name] = (report(path), res.stdout.str())
    loose, out = runs["loose"]
    item = by_candidate(loose)[("relu", "clamp")]
    assert item["verdict"] == "accepted", item["reason"]
    assert item["reason"].startswith("2 pairs of processes of 5 (its CI reached the target)"), item["reason"]
    assert item["ci_target_met"] is True and item["details"]["precision"]["pairs_of_processes"] == 2
    until = item["details"]["until_target"]
    assert until["max_pairs"] == 5 and until["stopped_at_target"] is True
    assert until["readings"] == [{"pairs": 2, "ci_rel_width": until["readings"][-1]["ci_rel_width"]}]
    assert until["readings"][-1]["ci_rel_width"] <= 100
    assert loose["run"]["provenance"]["max_pairs"] == 5 and loose["run"]["provenance"].get("process_pairs") is None
    assert "precision: 1 of 1 item(s) reached the 10000.0% CI target" in out
    tight, out = runs["tight"]
    item = by_candidate(tight)[("relu", "clamp")]
    assert item["verdict"] == "accepted", item["reason"]
    assert item["reason"].startswith("3 pairs of processes ("), item["reason"]
    assert item["details"]["until_target"]["stopped_at_target"] is False
    assert len(item["details"]["timing"]["calibration"]["process_pairs"]) == 3
    assert "--autotune-max-pairs=" in out
    res = pytester.runpytest_subprocess("--problems=suite", "--autotune", "--autotune-exploratory",
                                        "--autotune-pairs=4", "--autotune-max-pairs=8")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    assert "keep --autotune-pairs=N to run all N, or --autotune-max-pairs=N" in res.stderr.str() + res.stdout.str()


def test_strongest_declared_baseline_is_used_and_strawman_is_shown(softmax_session: dict):
    item = softmax_session[("softmax", "same_as_best")]
    assert item["baseline"] == "previous_best"
    # vs the strongest baseline it is about even; vs the naive reference it reads faster (the strawman number)
    assert item["strawman_speedup"] > item["speedup"]
    assert 0.67 < item["speedup"] < 1.5  # an A/A in effect (the same code in both arms): the bound of test_aa_item...


def test_modification_surface_is_enforced(relu_session):
    session, res = relu_session
    # a change to the candidate only: allowed (the session's other two items are refused by their gates:
    # test_identity_relu_and_bf16_downgrade_are_not_accepted)
    res.assert_outcomes(passed=1, failed=2)
    items = by_candidate(report(session.path / "r.json"))
    assert items[("relu", "clamp")]["verdict"] == "accepted", items[("relu", "clamp")]
    # a change to the problem (or the protocol, or a gate): refused, naming the file
    session.chdir()
    write(session.path, "suite/relu.py", F.RELU.replace("dim = 4096", "dim = 64"))
    res = session.runpytest("--problems=suite", "--autotune", "--autotune-exploratory", "--autotune-base=HEAD")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    assert "outside the modification surface" in res.stderr.str() and "suite/relu.py" in res.stderr.str()


def test_xdist_gives_the_same_verdicts_and_one_row_per_accepted_item(pytester: pytest.Pytester, tmp_path, monkeypatch):
    """-n 2 gives the verdicts of -n 0; only the controller writes; one row per accepted item.
    Several devices on the CPU: the host is made to report two devices of the kind (as a two-GPU host does), so worker gwN
    measures on index N mod 2 -- recorded in every row's provenance -- and times under that index's own lock."""
    write(pytester.path, "suite/relu.py", F.RELU)
    write(pytester.path, "suite/softmax.py", F.SOFTMAX)
    write(pytester.path, "suite/linear.py", F.LINEAR)
    write(pytester.path, "suite/candidates/relu/clamp.py", F.CAND_RELU_CLAMP)
    write(pytester.path, "suite/candidates/relu/bf16.py", F.CAND_RELU_BF16)
    write(pytester.path, "suite/candidates/softmax/fused.py", F.CAND_SOFTMAX)
    write(pytester.path, "suite/candidates/linear/addmm.py", F.CAND_LINEAR)
    fast(pytester, **{"timing.item_budget_s": "0.3"})
    pytester.makeconftest("from pytest_autotune.measure.devices.cpu import CpuDevice\n"
                          "CpuDevice.count = classmethod(lambda cls: 2)  # a two-device host\n")
    locks = tmp_path / "locks"
    monkeypatch.setenv("PYTEST_AUTOTUNE_LOCK_DIR", str(locks))
    args = ["--problems=suite", "--autotune", "--autotune-exploratory"]
    pytester.runpytest_subprocess(*args, "-n", "0", "--autotune-json=r0.json", "--autotune-db=a.db")
    pytester.runpytest_subprocess(*args, "-n", "2", "--autotune-json=r2.json", "--autotune-db=b.db")
    v0 = {k: (i["verdict"], i["gate"]) for k, i in by_candidate(report(pytester.path / "r0.json")).items()}
    v2 = {k: (i["verdict"], i["gate"]) for k, i in by_candidate(report(pytester.path / "r2.json")).items()}
    assert v0 == v2 and len(v0) == 4
    accepted = sorted(i["nodeid"] for i in report(pytester.path / "r2.json")["items"] if i["verdict"] == "accepted")
    con = sqlite3.connect(pytester.path / "b.db")
    assert sorted(r[0] for r in con.execute("select nodeid from results")) == accepted
    assert con.execute("select count(*) from rejections").fetchone() == (1,)
    # each worker on its own device index, never another's; its lock named after it
    used = set()
    for (prov,) in con.execute("select provenance from results"):
        p = json.loads(prov)
        assert p["worker"] in ("gw0", "gw1") and p["device_index"] == int(p["worker"][2:]) % 2, p
        used.add(p["device_index"])
    assert used and {f"cpu{i}.lock" for i in used} <= {f.name for f in locks.iterdir()}
    for (prov,) in sqlite3.connect(pytester.path / "a.db").execute("select provenance from results"):
        assert json.loads(prov)["device_index"] == 0 and json.loads(prov).get("worker") is None
