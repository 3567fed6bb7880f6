"""A result says how it was measured: the environment variables that change a measurement are recorded in every
run's provenance (``environment``, ``budget_scale``; docs/reference/environment.md). The end-to-end check, a recording
session under ``PYTEST_AUTOTUNE_BUDGET_SCALE``, is in tests/test_examples_e2e.py."""

from __future__ import annotations

import math
import os

import e2e_files as F
import pytest

from pytest_autotune.errors import AutotuneUsageError
from pytest_autotune.provenance import (
    BUDGET_SCALE_ENV,
    MEASUREMENT_ENV,
    MEASUREMENT_ENV_PREFIXES,
    budget_scale,
    builtin_keys,
    collect,
    measurement_environment,
)
from pytest_autotune.sandbox.environment import sandbox_env

#: what a sandbox inherits that says where things are or who runs them, and changes no measurement: the build key
#: records the compilers (CC, CXX: docs/guide/compiled-candidates.md), and the rest locate files and the user
NOT_A_MEASUREMENT = {"PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR", "TEMP", "TMP", "USER", "LOGNAME",
                     "SHELL", "SYSTEMROOT", "VIRTUAL_ENV", "TORCH_HOME", "CC", "CXX"}


@pytest.mark.parametrize(("raw", "want"), [("", 1.0), ("1", 1.0), ("0.5", 0.5), (" 2 ", 2.0), ("1e-1", 0.1)])
def test_the_budget_scale_is_read_as_a_positive_factor(raw: str, want: float) -> None:
    assert math.isclose(budget_scale({BUDGET_SCALE_ENV: raw}), want)
    assert budget_scale({}) == 1.0


@pytest.mark.parametrize("raw", ["abc", "0", "-1", "inf", "nan", "1,5"])
def test_a_budget_scale_that_is_not_a_positive_number_is_refused_with_the_fix(raw: str) -> None:
    with pytest.raises(AutotuneUsageError) as e:
        budget_scale({BUDGET_SCALE_ENV: raw})
    assert BUDGET_SCALE_ENV in str(e.value) and "unset it" in str(e.value)


def test_the_variables_that_change_a_measurement_are_kept_and_nothing_else() -> None:
    env = {BUDGET_SCALE_ENV: "0.5", "CUDA_VISIBLE_DEVICES": "1", "CUDA_LAUNCH_BLOCKING": "1", "MLX_X": "y",
           "OPENBLAS_CORETYPE": "Haswell", "HOME": "/home/x", "PATH": "/bin", "OPENAI_API_KEY": "sk-secret",
           "PYTEST_ADDOPTS": "-x", "AUTOTUNE_JAIL_PLAN": "{}"}
    assert measurement_environment(env) == {BUDGET_SCALE_ENV: "0.5", "CUDA_LAUNCH_BLOCKING": "1",
                                            "CUDA_VISIBLE_DEVICES": "1", "MLX_X": "y",
                                            "OPENBLAS_CORETYPE": "Haswell"}


def test_the_run_provenance_records_them(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(BUDGET_SCALE_ENV, "0.25")
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    run = collect([k for k in builtin_keys() if k.name in ("budget_scale", "environment")], "run", {})
    assert run["budget_scale"] == 0.25
    assert run["environment"][BUDGET_SCALE_ENV] == "0.25" and run["environment"]["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"


def test_what_a_sandbox_inherits_is_recorded_or_changes_no_measurement(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every variable the sandboxes inherit from the controller is either recorded (MEASUREMENT_ENV) or named in
    NOT_A_MEASUREMENT above: a variable added to the sandbox's environment must be placed in one of them."""
    probe = {**{k: "x" for k in NOT_A_MEASUREMENT | set(MEASUREMENT_ENV)},
             **{p + "PROBE": "x" for p in MEASUREMENT_ENV_PREFIXES}}
    for name in ["NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS", "LD_LIBRARY_PATH",
                 "DYLD_LIBRARY_PATH", "OPENBLAS_L2_SIZE", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "CUDA_HOME"]:
        probe[name] = "x"
    for k in list(os.environ):
        monkeypatch.delenv(k)
    for k, v in probe.items():
        monkeypatch.setenv(k, v)
    # whatever else the sandbox sets itself (thread counts, hash seed) is the protocol's, not the controller's
    inherited = {k for k in sandbox_env(1) if k in probe}
    unplaced = sorted(k for k in inherited if k not in NOT_A_MEASUREMENT and k not in measurement_environment(probe))
    assert not unplaced, f"inherited by sandboxes but neither recorded nor named as no measurement: {unplaced}"
    assert set(measurement_environment(probe)) <= inherited | {BUDGET_SCALE_ENV, "AUTOTUNE_JAIL_EMULATE"}


def test_a_bad_budget_scale_stops_the_session_before_collection(pytester: pytest.Pytester,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    (pytester.path / "suite").mkdir()
    (pytester.path / "suite" / "relu.py").write_text(F.RELU)
    monkeypatch.setenv(BUDGET_SCALE_ENV, "fast")
    res = pytester.runpytest("--problems=suite")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    assert f"{BUDGET_SCALE_ENV}='fast' is not a positive number" in res.stderr.str()
