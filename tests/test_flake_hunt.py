"""The flake hunt's cheap parts (benchmarks/harness/flake_hunt.py): the report from junitxml files, which runs get
the hog, and the hog itself -- started, measured, and stopped on every way out (a normal end, an exception, the
hunter killed outright)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

HARNESS = Path(__file__).resolve().parents[1] / "benchmarks" / "harness"
sys.path.insert(0, str(HARNESS))

import flake_hog  # noqa: E402
import flake_hunt  # noqa: E402
import flake_report  # noqa: E402

#: seconds within which a process that was told to stop must be gone: generous, for a loaded 2-core machine (a
#: hog process checks its parent every 0.1 s; the stop waits 5 s before it kills)
GONE_WITHIN_S = 60.0


def junit(cases: str) -> str:
    return f'<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">{cases}</testsuite></testsuites>'


RUN1 = junit(
    '<testcase classname="tests.test_a" name="test_ok" file="tests/test_a.py" line="3" time="0.5"/>'
    '<testcase classname="tests.test_a" name="test_timing[x]" file="tests/test_a.py" line="9" time="2.0"/>'
    '<testcase classname="tests.test_b.TestC" name="test_m" file="tests/test_b.py" line="1" time="0.1">'
    '<skipped type="pytest.skip" message="needs a GPU">skip</skipped></testcase>')
RUN2 = junit(
    '<testcase classname="tests.test_a" name="test_ok" file="tests/test_a.py" line="3" time="0.4"/>'
    '<testcase classname="tests.test_a" name="test_timing[x]" file="tests/test_a.py" line="9" time="3.0">'
    '<failure message="assert 3 == 2">/checkout/tests/test_a.py:12: assert 3 == 2</failure></testcase>'
    '<testcase classname="tests.test_a" name="test_timing[x]" file="tests/test_a.py" line="9" time="0.0">'
    '<error message="teardown">teardown failed</error></testcase>'
    '<testcase classname="tests.test_b.TestC" name="test_m" file="tests/test_b.py" line="1" time="0.1">'
    '<error message="fixture setup">boom</error></testcase>')


def test_node_ids_from_junitxml() -> None:
    assert flake_report.node_id({"classname": "tests.test_b.TestC", "name": "t[1]", "file": "tests/test_b.py"}) \
        == "tests/test_b.py::TestC::t[1]"
    assert flake_report.node_id({"classname": "tests.test_a", "name": "t", "file": "tests/test_a.py"}) \
        == "tests/test_a.py::t"
    # xunit2 writes no file: the dotted classname is read as the path
    assert flake_report.node_id({"classname": "tests.test_b.TestC", "name": "t"}) == "tests/test_b.py::TestC::t"
    assert flake_report.node_id({"classname": "", "name": "tests.test_broken"}) == "tests/test_broken.py"


def test_report_lists_every_test_that_failed_once_with_its_text(tmp_path: Path) -> None:
    for n, text in ((1, RUN1), (2, RUN2)):
        (tmp_path / f"{n}.xml").write_text(text)
    runs = [{"run": n, "wall_s": 10.0 * n, "rc": n - 1, "load": {"hog": None}} for n in (1, 2, 3)]
    redact = {"/checkout": "<repository>"}
    outcomes = {1: flake_report.read_junit(tmp_path / "1.xml", redact),
                2: flake_report.read_junit(tmp_path / "2.xml", redact), 3: None}
    report = flake_report.aggregate(runs, outcomes)
    assert report["runs"][0]["counts"] == {"passed": 2, "failed": 0, "error": 0, "skipped": 1}
    assert report["runs"][1]["counts"] == {"passed": 1, "failed": 1, "error": 2, "skipped": 0}
    assert report["runs"][2]["counts"] is None
    assert report["runs"][1]["slowest"][0] == {"test": "tests/test_a.py::test_timing[x]", "seconds": 3.0}
    failing = {f["test"]: f for f in report["failing"]}
    assert set(failing) == {"tests/test_a.py::test_timing[x]", "tests/test_b.py::TestC::test_m"}
    timing = failing["tests/test_a.py::test_timing[x]"]
    assert timing["failed_runs"] == [2]
    # the call's failure is kept over the same test's teardown error; the checkout's path is redacted
    assert timing["failures"] == [{"run": 2, "outcome": "failed", "message": "assert 3 == 2",
                                   "text": "<repository>/tests/test_a.py:12: assert 3 == 2"}]
    assert timing["outcomes"] == {"1": "passed", "2": "failed", "3": "absent"}
    assert failing["tests/test_b.py::TestC::test_m"]["outcomes"]["1"] == "skipped"
    assert report["summary"] == {"runs": 3, "green": 1, "tests_failed_at_least_once": 2, "runs_without_junitxml": [3]}
    md = flake_report.markdown(report, {"date": "2026-12-06", "commit": "abc1234", "command": "python -m pytest tests"})
    assert "### `tests/test_a.py::test_timing[x]`" in md and "assert 3 == 2" in md
    assert "**3 run(s), 1 green; 2 test(s) failed in at least one run**" in md


def test_report_only_rewrites_a_hunts_report_from_its_folder(tmp_path: Path) -> None:
    folder = tmp_path / "run-01"
    folder.mkdir()
    (folder / "junit.xml").write_text(RUN2)
    (folder / "run.json").write_text(json.dumps({"run": 1, "wall_s": 5.0, "rc": 1, "junit": "run-01/junit.xml",
                                                 "load": {"machine_busy": 0.5}}))
    (tmp_path / "report.json").write_text(json.dumps({"head": {"commit": "abc1234"}}))
    assert flake_hunt.main(["--report-only", str(tmp_path)]) == 1
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["head"] == {"commit": "abc1234"} and report["summary"]["tests_failed_at_least_once"] == 2
    assert "machine 50% busy" in (tmp_path / "report.md").read_text()


def test_hog_plan_spreads_the_hogged_runs_and_keeps_the_first_quiet() -> None:
    assert flake_hunt.hog_plan(3, 2) == [False, True, True]
    assert flake_hunt.hog_plan(4, 2) == [False, True, False, True]
    assert flake_hunt.hog_plan(5, 0) == [False] * 5 and flake_hunt.hog_plan(2, 2) == [True, True]
    for runs in range(1, 9):
        for hogged in range(runs + 1):
            assert sum(flake_hunt.hog_plan(runs, hogged)) == hogged
    with pytest.raises(ValueError, match="--hog-runs=4"):
        flake_hunt.hog_plan(3, 4)


def test_hog_usage_errors_name_the_fix() -> None:
    with pytest.raises(ValueError, match=r"in \(0, 1\]"):
        flake_hog.Hog(duty=0.0)
    with pytest.raises(ValueError, match="may use CPUs"):
        flake_hog.Hog(cpus=[10_000])


def _gone(pid: int) -> bool:
    deadline = time.monotonic() + GONE_WITHIN_S
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return True
        if state == "Z":  # exited; its parent has not reaped it yet
            return True
        time.sleep(0.02)
    return False


def test_hog_runs_pinned_uses_cpu_and_stops_on_an_exception() -> None:
    cpu = sorted(os.sched_getaffinity(0))[-1]
    hog = flake_hog.Hog(procs=2, duty=0.5, cpus=[cpu], period_s=0.02)
    with pytest.raises(RuntimeError, match="the test's error"):
        with hog:
            pids = hog.pids
            assert len(pids) == 2 and hog.running() == pids
            assert all(os.sched_getaffinity(pid) == {cpu} for pid in pids)
            # CPU time is booked in ticks: wait until one is (the deadline only for a machine that never runs it)
            deadline = time.monotonic() + GONE_WITHIN_S
            while hog.cpu_seconds() == 0 and time.monotonic() < deadline:
                time.sleep(0.02)
            assert hog.cpu_seconds() > 0
            raise RuntimeError("the test's error")
    assert all(_gone(pid) for pid in pids) and hog.running() == []
    # its wall time runs from before the first process started (each a Python start, milliseconds), so it is never
    # zero where CPU was booked (a wall clock started after the processes read 0.0 s beside 0.01 CPU-s once)
    achieved = hog.achieved()
    assert achieved["cpu_s"] > 0 and achieved["wall_s"] > 0, achieved
    hog.stop()  # twice is fine


def test_hog_leaves_when_the_hunter_is_killed(tmp_path: Path) -> None:
    """A hunter killed with SIGKILL runs no ``finally``: its hog processes see their parent gone and leave."""
    script = (f"import sys; sys.path.insert(0, {str(HARNESS)!r}); import flake_hog, time\n"
              "hog = flake_hog.Hog(procs=1, duty=0.2, period_s=0.02).start()\n"
              "print(hog.pids[0], flush=True)\ntime.sleep(600)\n")
    hunter = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert hunter.stdout is not None
    pid = int(hunter.stdout.readline())
    hunter.send_signal(signal.SIGKILL)
    hunter.wait()
    hunter.stdout.close()
    assert _gone(pid)


def test_a_hunted_run_stops_its_hog_and_pytest_on_interrupt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C during a hogged run: pytest's process group is interrupted and the hog stopped before it propagates."""
    started: list[flake_hog.Hog] = []
    real_start = flake_hog.Hog.start

    def start(self: flake_hog.Hog) -> flake_hog.Hog:
        started.append(self)
        return real_start(self)

    def interrupted(cmd: list[str], log: Path, timeout_s: object) -> int:
        assert started and started[0].running()
        raise KeyboardInterrupt

    monkeypatch.setattr(flake_hog.Hog, "start", start)
    monkeypatch.setattr(flake_hunt, "run_pytest", interrupted)
    args = flake_hunt.parse(["--hog", "1", "--hog-duty", "0.1", "tests/test_x.py"])
    with pytest.raises(KeyboardInterrupt):
        flake_hunt.one_run(1, True, args, tmp_path)
    assert started[0].running() == []


def test_run_pytest_kills_a_run_past_its_timeout(tmp_path: Path) -> None:
    # SIGINT as pytest has it: a process started from a background job inherits SIGINT ignored, and Python keeps an
    # ignored SIGINT ignored, so the sleeper would wait out the whole grace period for its SIGKILL (30 s of the suite)
    cmd = [sys.executable, "-c", "import signal, time; signal.signal(signal.SIGINT, signal.default_int_handler); "
           "time.sleep(600)"]
    t0 = time.monotonic()
    rc = flake_hunt.run_pytest(cmd, tmp_path / "log", timeout_s=0.5)
    assert rc != 0 and time.monotonic() - t0 < GONE_WITHIN_S
    assert "interrupted" in (tmp_path / "log").read_text()


def test_quiet_timing_tests_run_only_when_asked(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """The root conftest.py deselects tests marked ``quiet_timing`` from a plain run (the README's command); the
    environment variable or ``-m quiet_timing`` (CI's quiet-timing step) runs them."""
    root = Path(__file__).resolve().parents[1]
    pytester.makeconftest((root / "conftest.py").read_text())
    pytester.makeini("[pytest]\nmarkers =\n    quiet_timing: x\n    gpu: x\n    real_engine: x\n")
    pytester.makepyfile(test_q="import pytest\n\n@pytest.mark.quiet_timing\ndef test_quiet():\n    pass\n\n"
                               "def test_plain():\n    pass\n")
    monkeypatch.delenv("PYTEST_AUTOTUNE_QUIET_TIMING", raising=False)
    res = pytester.runpytest("-v")
    res.assert_outcomes(passed=1, deselected=1)
    assert "test_plain PASSED" in res.stdout.str() and "::test_quiet" not in res.stdout.str()
    res = pytester.runpytest("-v", "-m", "quiet_timing")
    res.assert_outcomes(passed=1, deselected=1)
    assert "test_quiet PASSED" in res.stdout.str()
    monkeypatch.setenv("PYTEST_AUTOTUNE_QUIET_TIMING", "1")
    pytester.runpytest().assert_outcomes(passed=2)
