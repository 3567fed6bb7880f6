"""The LLM tuner against a REAL OpenAI-compatible server (docs/guide/llm-tuner.md): vLLM's CPU build serving the tiny local
random-weight Llama (the engines' model, docs/guide/engines.md). Its replies are gibberish, so every iteration is
unusable (no code) and the study reads "below usability bar"; with a small ``--max-tokens`` the replies stop at the
cap and the audit flags truncation: "plumbing suspect". One vLLM launch (~35-90 s on 2 cores), three calls.

Marked ``real_engine``: it runs in CI's engine step (``.ci/run``: ``PYTEST_AUTOTUNE_REAL_ENGINES=1``, vLLM installed
by ``autotune engine install vllm``); without vLLM it is skipped, unless ``PYTEST_AUTOTUNE_REQUIRE_ENGINES=1``."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import e2e_files as F
import httpcore  # noqa: F401
import httpx
import pytest
import safetensors.torch  # noqa: F401
import tokenizers  # noqa: F401
from test_agent_e2e import STUDIES, autotune, session_env
from test_study_e2e import frozen_fast_protocol, git, write

from pytest_autotune.engines.adapters.base import FlagSet
from pytest_autotune.engines.adapters.vllm import VllmAdapter
from pytest_autotune.engines.install import CACHE_ENV, cache_root, find_installation
from pytest_autotune.engines.item import base_env
from pytest_autotune.engines.model import ModelSpec, make_model
from pytest_autotune.engines.server import EngineServer

sys.path.insert(0, str(Path(__file__).parent / "engine_fakes"))
from support import processes_matching  # noqa: E402

httpx.Client(trust_env=False).close()

pytestmark = pytest.mark.real_engine

SERVED = "tiny-llama"
LOG = "candidates/search/relu-agent/llm/relu/calls.jsonl"


@pytest.fixture(scope="module")
def engine_cache():
    """The user's engine cache, read before pytester points HOME at its temporary folder."""
    return cache_root()


def test_the_tiny_local_model_is_below_the_usability_bar_with_truncation_flagged(engine_cache, pytester, tmp_path,
                                                                                  monkeypatch):
    monkeypatch.setenv(CACHE_ENV, str(engine_cache))
    adapter = VllmAdapter()
    inst = find_installation(adapter)
    if inst is None:
        msg = "vLLM is not installed in the engine cache: autotune engine install vllm"
        if os.environ.get("PYTEST_AUTOTUNE_REQUIRE_ENGINES") == "1":
            pytest.fail(msg + " (PYTEST_AUTOTUNE_REQUIRE_ENGINES=1: CI must run the real endpoint)")
        pytest.skip(msg)
    model = make_model(ModelSpec(), engine_cache / "models")
    root = pytester.path
    session_env(monkeypatch)
    frozen_fast_protocol(root)
    write(root, "suite/relu.py", F.RELU)
    write(root, "studies.toml", STUDIES)
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "register the study before any result")
    # the prompt (problem source and instructions) is ~1,500 of this tokenizer's tokens: the model's whole context
    flags = FlagSet.of({"enforce-eager": True, "dtype": "float32", "max-model-len": 2048})
    server = EngineServer(lambda port: adapter.command(inst, model, SERVED, port, flags),
                          env={**base_env(), **adapter.env(inst, tmp_path)}, log=tmp_path / "vllm.log",
                          health_path=adapter.health_path, launch_timeout_s=600.0)
    with server:
        res = autotune(pytester, "search", "--tuner=llm", f"--endpoint={server.base_url}/v1", f"--model={SERVED}",
                       "--budget=3", "--max-tokens=16", "--temperature=0", "--study=relu-agent", "--arm=llm",
                       "--problem=suite/relu.py")
    out = res.stdout.str()
    assert res.ret == 0, out[-4000:] + res.stderr.str() + (tmp_path / "vllm.log").read_text()[-3000:]
    log = [json.loads(line) for line in (root / LOG).read_text().splitlines()]
    assert len(log) == 3 and all(r["status"] == 200 and r["error"] is None for r in log), log
    assert all(r["response"]["model"] == SERVED and r["usage"]["prompt_tokens"] > 500 for r in log)
    assert "usable: 0 of 3 iteration(s)" in out
    report = autotune(pytester, "study", "report", "relu-agent", "--json=report.json")
    rep = json.loads((root / "report.json").read_text())
    assert rep["verdict"].startswith("below usability bar (arm llm: 0 of 3 iterations usable"), report.stdout.str()
    # 16 tokens of a random model: the cap, not the end of an answer
    truncated = sum(r["finish_reason"] == "length" for r in log)
    assert truncated >= 2 and rep["audits"]["llm"]["overall"]["truncated"] == truncated
    assert rep["plumbing_suspect"] and rep["label"].endswith("[plumbing suspect]")
    assert "below usability bar" in report.stdout.str() and "SUSPECT: truncation" in report.stdout.str()
    assert not processes_matching("vllm.entrypoints.openai.api_server")
