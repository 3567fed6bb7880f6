"""The example workflow (.github/workflows/kernel-pr.yml, docs/guide/ci.md) parses as YAML, has the structure of a GitHub
Actions workflow (tests/github_workflow.schema.json), its shell steps parse, and it gates the way docs/guide/ci.md says."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest

from conftest import REPO

WORKFLOW = REPO / ".github" / "workflows" / "kernel-pr.yml"


def load() -> dict:
    yaml = pytest.importorskip("yaml")
    wf = yaml.safe_load(WORKFLOW.read_text())
    if True in wf:  # YAML 1.1 reads the key `on` as a boolean
        wf["on"] = wf.pop(True)
    return wf


def test_workflow_is_a_valid_actions_workflow():
    import jsonschema

    schema = json.loads((REPO / "tests" / "github_workflow.schema.json").read_text())
    wf = load()
    jsonschema.validate(wf, schema)
    # the schema has teeth: a misspelt key, or a step that both runs and uses, is refused
    bad_job = {k.replace("runs-on", "runs_on"): v for k, v in wf["jobs"]["gate"].items()}
    bad_step = {**wf["jobs"]["gate"]["steps"][0], "run": "true"}
    for bad in ({**wf, "jobs": {"gate": bad_job}},
                {**wf, "jobs": {"gate": {**wf["jobs"]["gate"], "steps": [bad_step]}}}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema)


def test_workflow_steps_are_valid_shell():
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("no bash")
    for name, job in load()["jobs"].items():
        for step in job["steps"]:
            if "run" in step:
                script = re.sub(r"\$\{\{[^}]*\}\}", "x", step["run"])  # expressions are filled in before bash
                res = subprocess.run([bash, "-n"], input=script, capture_output=True, text=True)
                assert res.returncode == 0, f"{name}/{step.get('name')}: {res.stderr}"


def test_workflow_gates_kernel_prs_as_documented():
    wf = load()
    jobs = wf["jobs"]
    assert set(wf["on"]) >= {"push", "pull_request"} and wf["on"]["push"]["branches"] == ["main"]
    gate = "\n".join(s.get("run", "") for s in jobs["gate"]["steps"])
    for flag in ("--autotune-base=", "--autotune-changed-only", "--autotune-compare=", "--autotune-fail-on=regression",
                 "--autotune-md=", "--junitxml="):
        assert flag in gate, flag
    # the baseline comes from the default branch: saved there, restored here
    saved = [s for s in jobs["baseline"]["steps"] if s.get("uses", "").startswith("actions/cache/save")]
    restored = [s for s in jobs["gate"]["steps"] if s.get("uses", "").startswith("actions/cache/restore")]
    assert saved and restored and saved[0]["with"]["path"] == restored[0]["with"]["path"]
    assert "autotune export latest --json" in "\n".join(s.get("run", "") for s in jobs["baseline"]["steps"])
    # the torch wheel is cached (pip's cache, keyed by the torch version)
    for job in ("baseline", "gate"):
        caches = [s for s in jobs[job]["steps"] if s.get("uses", "").startswith("actions/cache@")]
        assert caches and "torch" in caches[0]["with"]["key"] and "PIP_CACHE_DIR" in caches[0]["with"]["path"]
    assert "PIP_CACHE_DIR" in wf["env"] and re.fullmatch(r"\d+\.\d+\.\d+", wf["env"]["TORCH_VERSION"])
    gpu = jobs["gate-gpu"]
    assert "self-hosted" in gpu["runs-on"] and "--device=cuda" in "\n".join(s.get("run", "") for s in gpu["steps"])
    assert "docs/guide/ci.md" in (REPO / "README.md").read_text()
