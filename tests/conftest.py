"""Test-suite configuration: a fast exploratory protocol for the end-to-end tests (pytester itself is requested by
the root conftest.py)."""

from __future__ import annotations

import os
from pathlib import Path

# Some end-to-end tests run their quick sessions (usage errors, collection, correctness only: nothing timed) in this
# process with ``pytester.runpytest``, which saves each one the interpreter's start and the imports below (~3-5 s
# on 2 cores). Pytester drops the modules first imported during such a session when it ends, and torch and numpy
# cannot be imported twice in a process: they are imported here, before any session (as are the probes, whose
# hypothesis import would otherwise be paid again by every session).
import numpy  # noqa: F401
import pytest
import torch  # noqa: F401

import pytest_autotune.gates.probes  # noqa: F401
from pytest_autotune.measure.lock import LOCK_DIR_ENV, lock_dir

REPO = Path(__file__).resolve().parents[1]


class ModuleRequest:
    """A module-scoped fixture's request, looking like a function-scoped one to ``pytest.Pytester`` (which names its
    folder after ``request.function``); everything else is the real request. For module-scoped Pytester sessions
    (tests/test_cheat_catalog.py, tests/test_heldout.py)."""

    function = None

    def __init__(self, request: pytest.FixtureRequest) -> None:
        self._request = request

    def __getattr__(self, name: str):
        return getattr(self._request, name)


def fast_protocol_text(**overrides: str) -> str:
    """protocol.toml with short budgets for end-to-end tests (run them with --autotune-exploratory).
    ``overrides`` maps "section.key" to a TOML literal."""
    text = (REPO / "protocol.toml").read_text()
    defaults = {
        "timing.min_pairs": "8",
        "timing.item_budget_s": "0.6",
        "timing.check_every": "4",
        "timing.calibration_calls": "4",
        "timing.min_sample_s": "0.001",
        "probes.max_examples": "6",
        "probes.shape_examples": "2",
        # one pair of processes per item: the suite's items test gates and plumbing, not between-process offsets
        # (the pooled path has its own tests: tests/test_plugin_e2e.py::test_aa_item_reads_about_one)
        "timing.process_pairs": "1",
        "devices.cuda.process_pairs": "1",
    }
    defaults.update(overrides)
    lines = text.splitlines()
    section = ""
    out = []
    for line in lines:
        stripped = line.strip()
        if stripped.startswith("[") and stripped.endswith("]"):
            section = stripped.strip("[]")
        key = stripped.split("=", 1)[0].strip() if "=" in stripped and not stripped.startswith("#") else None
        full = f"{section}.{key}" if key else None
        if full in defaults:
            comment = ""
            out.append(f"{key} = {defaults.pop(full)}{comment}")
            continue
        out.append(line)
    if defaults:
        raise KeyError(f"unknown protocol keys in overrides: {sorted(defaults)}")
    return "\n".join(out) + "\n"


@pytest.fixture
def fast_protocol():
    return fast_protocol_text


@pytest.fixture(autouse=True)
def _torch_threads_restored():
    """An in-process session sets this process's torch threads to the protocol's ``cpu_threads`` (the controller's
    device setup): put them back, so that no later test inherits them."""
    threads = torch.get_num_threads()
    yield
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)


def pytest_configure(config: pytest.Config) -> None:
    """The suite's slowest 30 tests are listed at the end of a run (docs/results/test-suite.md keeps them), unless
    ``--durations`` says otherwise. Set here, not in pyproject.toml's ``addopts``, which every pytest run at the
    repository's root reads -- the README's main job included."""
    if config.option.durations is None:
        config.option.durations = 30


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """Under xdist (the README's ``python3 -m pytest -n 2 tests``) a test file goes to one worker whole, so that a
    module's session fixture (the cheat catalog's sessions, the jail's, the end-to-end modules') runs once: xdist's
    ``--dist loadfile``, chosen here where ``-n`` alone would load-balance test by test. Not in ``addopts``: a
    ``--dist`` there is read by every run at the repository's root (docs/results/test-suite.md); an explicit
    ``--dist`` other than ``load`` is xdist's to honour."""
    if config.getvalue("dist") != "load":
        return None
    from xdist.scheduler import LoadFileScheduling

    return LoadFileScheduling(config, log)


@pytest.fixture(autouse=True)
def _no_github_step_summary(monkeypatch: pytest.MonkeyPatch) -> None:
    """The plugin appends its Markdown summary to $GITHUB_STEP_SUMMARY (docs/guide/ci.md): the pytester sessions of this
    suite, run in GitHub Actions, must not write into the job's summary."""
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)


@pytest.fixture(scope="session", autouse=True)
def _one_timing_lock_folder_for_the_machine():
    """Every session this suite starts takes turns on the machine's device locks (pytest_autotune/measure/lock.py),
    even a test that points TMPDIR at a folder of its own (the cheat catalog's sessions, for their sandbox logs): the
    lock folder's default lies under TMPDIR. Under xdist (the README's ``-n 2``) the other worker's timing then waits
    for this one's, as two users' sessions on one machine would. A test that wants a private lock sets its own
    (tests/test_engines_server.py: three sessions killed side by side); the jail's sessions start from an environment
    without PYTEST_ variables and keep theirs."""
    if LOCK_DIR_ENV in os.environ:
        yield
        return
    os.environ[LOCK_DIR_ENV] = str(lock_dir())
    try:
        yield
    finally:
        os.environ.pop(LOCK_DIR_ENV, None)
