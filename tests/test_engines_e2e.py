"""Engine items end to end, with the fake engine (tests/engine_fakes) registered through the
``pytest_autotune_engines`` hook like any third-party engine: collection from a declaration file, paired
launches, the quality gate, treatment delivery, error handling, the breaker, rows in the store, the report.

One pytester session measures every case (a launch of the fake server takes well under a second)."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

# pytester drops the modules first imported inside a test when it ends: torch cannot be imported twice in a
# process, and a re-imported httpx no longer matches httpcore's exception classes. Import them all up front
# (httpx imports its transport, httpcore and anyio, lazily on first use: make one client).
import httpcore  # noqa: F401
import httpx
import prometheus_client.parser  # noqa: F401
import pytest
import safetensors.torch  # noqa: F401
import tokenizers  # noqa: F401

import pytest_autotune.engines.run  # noqa: F401
from pytest_autotune.store import ResultStore

httpx.Client(trust_env=False).close()

sys.path.insert(0, str(Path(__file__).parent / "engine_fakes"))
from support import CONFTEST, model_table, prepare_cache, processes_matching  # noqa: E402

DECLARATION = """
engine = "fake"
description = "the fake engine of the tests"
{model}
[server]
flags = {{ token-delay = 0.01 }}

[workloads.short]
profile = "short"
requests = 8
concurrency = 4
max_tokens = 8
prompt_tokens = [8, 16]

[configs.slots-2]
description = "2 requests at a time instead of 16: about 2x slower at 4 in flight"
flags = {{ slots = 2 }}

[configs.lossy]
flags = {{ lossy = true }}
expect = "refused:quality"

[configs.never-drafts]
flags = {{ spec-type = "ngram", spec-drafts = 0 }}
expect = "refused:delivery"

[configs.same-as-default]
flags = {{ slots = 16 }}

[configs.flaky]
flags = {{ fail-every = 7 }}

[configs.crashes]
flags = {{ exit-at-start = true }}

[space]
slots = [1, 2, 4, 8, 16]
token-delay = [0.001, 0.002]
"""

BREAKER = """
engine = "fake"
{model}
[server]
flags = {{ token-delay = 0.04 }}

[workloads.tiny]
profile = "short"
requests = 8
concurrency = 8
max_tokens = 6
prompt_tokens = [8, 8]

[configs.suspiciously-fast]
flags = {{ token-delay = 0.0002 }}
"""


@pytest.fixture(scope="module")
def engine_cache(tmp_path_factory):
    """An engine cache with the fake engine installed and the small model made (once per module: it imports
    torch, which must happen before pytester snapshots sys.modules)."""
    return prepare_cache(tmp_path_factory.mktemp("engine-cache"))


def _engine_session(pytester, tmp_path, monkeypatch, fast_protocol, cache):
    """One measuring session over both declaration files."""
    monkeypatch.setenv("PYTEST_AUTOTUNE_ENGINE_CACHE", str(cache))
    pytester.makeconftest(CONFTEST)
    (pytester.path / "protocol.toml").write_text(fast_protocol(**{
        "engines.windows_per_launch": "4", "engines.warmup_windows": "0", "engines.quality_prompts": "4",
        "engines.quality_max_tokens": "12",
        # the fake's answers do not depend on batching (the shipped 1 is for llama.cpp, whose batched greedy
        # decoding is not reproducible): 4 at a time saves ~0.4 s per launch, ~2 s per launch of the breaker's
        # slow default; every launch still answers and is judged on the same 4 prompts
        "engines.quality_concurrency": "4",
        "engines.stop_grace_s": "2.0", "engines.launch_timeout_s": "30.0", "engines.metrics_interval_s": "0.05",
        # the fake's "fast" configuration is 3-10x faster on a loaded machine: a breaker at 1.5x trips on it
        "breaker.max_speedup": "1.5",
    }))
    d = pytester.path / "benchmarks" / "engines"
    d.mkdir(parents=True)
    (d / "fake.toml").write_text(DECLARATION.format(model=model_table()))
    (d / "fake-breaker.toml").write_text(BREAKER.format(model=model_table()))
    db = tmp_path / "r.db"
    rep = tmp_path / "r.json"
    result = pytester.runpytest("--autotune", "--autotune-exploratory", "--autotune-aa", "benchmarks/engines",
                                "-p", "no:cacheprovider", "-k", "not default-aa or short", f"--autotune-db={db}",
                                f"--autotune-json={rep}", "-rA")
    return result, json.loads(rep.read_text()), db


def _items(report):
    return {i["nodeid"].split("::")[1]: i for i in report["items"]}


def test_engine_items_end_to_end(pytester, tmp_path, monkeypatch, fast_protocol, engine_cache):
    """Verdicts, pytest outcomes, rows and refusals in the store, the session-end section, server logs, and no
    server left behind — from one session (each case is an item of it)."""
    result, report, db = _engine_session(pytester, tmp_path, monkeypatch, fast_protocol, engine_cache)
    items = _items(report)
    out = result.stdout.str()
    assert set(items) == {"slots-2[short]", "lossy[short]", "never-drafts[short]", "same-as-default[short]",
                          "flaky[short]", "crashes[short]", "suspiciously-fast[tiny]", "default-aa[short]"}, out
    # --autotune-aa: the default against itself is measured like a configuration (no treatment to deliver)
    aa = items["default-aa[short]"]
    assert aa["verdict"] == "accepted" and 0.5 < aa["speedup"] < 2.0, aa
    # a real difference: accepted, clearly slower, CI excludes 1
    s2 = items["slots-2[short]"]
    assert s2["verdict"] == "accepted" and s2["kind"] == "engine", out
    assert s2["speedup"] < 0.8 and s2["ci"][1] < 1.0 and s2["n_pairs"] == 8, s2
    # the quality gate refuses output-changing configurations before their speed counts
    assert items["lossy[short]"]["gate"] == "quality"
    assert "greedy outputs changed: token agreement" in items["lossy[short]"]["reason"]
    # treatment delivery: a flag that does nothing, and a setting identical to the default's
    nd = items["never-drafts[short]"]
    assert nd["gate"] == "delivery" and nd["reason"].startswith("treatment not delivered")
    assert "0 drafts" in nd["reason"]
    same = items["same-as-default[short]"]
    assert same["verdict"] == "rejected" and same["gate"] == "delivery" and "already runs 16 slots" in same["reason"]
    # errors are never fast requests (a truncating server: test_engines_server.py)
    assert items["flaky[short]"]["gate"] == "timing" and "http 500" in items["flaky[short]"]["reason"]
    # a configuration that does not start is refused (the default did start)
    cr = items["crashes[short]"]
    assert cr["verdict"] == "rejected" and cr["gate"] == "launch"
    assert "RuntimeError: fake engine refuses this configuration" in cr["reason"]
    # above the breaker (1.5x in this protocol, 10x in the shipped one): quarantined, never a result
    fast = items["suspiciously-fast[tiny]"]
    assert fast["verdict"] == "quarantined" and fast["gate"] == "breaker" and fast["speedup"] > 1.5
    # pytest outcomes: expected refusals are xfail, the others fail with the gate in the message
    result.assert_outcomes(passed=2, failed=4, xfailed=2)
    import jsonschema

    from pytest_autotune.report.json_report import load_schema

    jsonschema.validate(report, load_schema())  # engine items fit the report's schema
    assert "QUARANTINED:" in out
    assert "REJECTED by delivery: treatment not delivered" in out
    assert "XFAIL benchmarks/engines/fake.toml::lossy[short]" in out

    # ---- the store: one result, refusals by gate, the quarantined one
    with ResultStore.open(db, readonly=True) as store:
        assert store.verify().ok
        rows = store.results()
        assert sorted(r["candidate"] for r in rows) == ["default-aa", "slots-2"]
        r = next(r for r in rows if r["candidate"] == "slots-2")
        assert r["kind"] == "engine" and r["problem"] == "fake:short" and r["baseline"] == "default"
        prov = json.loads(r["provenance"])
        seeds = json.loads(r["seeds"])
        assert prov["arms"]["baseline"]["engine"] == prov["arms"]["candidate"]["engine"] == "fake"
        assert prov["arms"]["baseline"]["seeds"] == prov["arms"]["candidate"]["seeds"] == seeds
        assert prov["engine"]["version"] == "fake-1" and len(prov["model"]["digest"]) == 64
        assert prov["workload"]["digest"] == r["problem_sha256"]
        assert prov["arms"]["candidate"]["argv"][-2:] == ["--token-delay", "0.002"] or "--slots" in \
            prov["arms"]["candidate"]["argv"]
        assert prov["quality"]["min_agreement"] == 1.0
        assert len(prov["launches"]) == 4 and [lo["arm"] for lo in prov["launches"]] == \
            ["default", "config", "config", "default"]
        gates = {(x["candidate"], x["gate"]) for x in store._conn.execute(
            "SELECT candidate, gate FROM rejections").fetchall()}
        assert {("lossy", "quality"), ("never-drafts", "delivery"), ("same-as-default", "delivery"),
                ("flaky", "timing"), ("crashes", "launch"),
                ("suspiciously-fast", "breaker")} <= gates
        q = store._conn.execute("SELECT kind, candidate, speedup FROM quarantine").fetchall()
        assert [(k, c) for k, c, _ in q] == [("engine", "suspiciously-fast")] and q[0][2] > 1.5

    # ---- the session-end section, progress, logs, and no server left
    assert "engine items: configuration / default requests/s" in out
    assert "quality gate: token agreement 1.000" in out
    assert "treatment delivery:" in out
    # progress while running: launches, readiness, windows
    assert "launch 1/4: default" in out and "window 4/4:" in out and "ready in" in out
    assert not processes_matching("fake_server.py")
    # server logs are kept, one per launch
    logs = sorted((db.parent / "engine-logs").rglob("*.log"))
    assert any(p.name == "02-config.log" for p in logs) and all(p.stat().st_size > 0 for p in logs)


def test_without_autotune_only_the_gates_run(pytester, tmp_path, monkeypatch, fast_protocol, engine_cache):
    """Without --autotune an engine item launches each arm once: quality gate and delivery, no timing, no rows."""
    monkeypatch.setenv("PYTEST_AUTOTUNE_ENGINE_CACHE", str(engine_cache))
    pytester.makeconftest(CONFTEST)
    # the shipped protocol's 16 quality prompts of 32 tokens, one at a time, cost the fake ~5 s per launch
    (pytester.path / "protocol.toml").write_text(fast_protocol(**{
        "engines.quality_prompts": "4", "engines.quality_max_tokens": "12"}))
    d = pytester.path / "benchmarks" / "engines"
    d.mkdir(parents=True)
    (d / "fake.toml").write_text(DECLARATION.format(model=model_table()))
    result = pytester.runpytest("benchmarks/engines", "-k", "slots", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    out = result.stdout.str()
    assert "launch 2/2: config" in out and "correctness only" in out
    assert not (pytester.path / ".autotune" / "results.db").exists()


def test_engine_not_installed_is_skipped_with_the_fix(pytester, tmp_path, monkeypatch):
    monkeypatch.setenv("PYTEST_AUTOTUNE_ENGINE_CACHE", str(tmp_path / "empty-cache"))
    d = pytester.path / "benchmarks" / "engines"
    d.mkdir(parents=True)
    (d / "v.toml").write_text(textwrap.dedent("""
        engine = "vllm"
        [workloads.short]
        profile = "short"
        [configs.mns4]
        flags = { max-num-seqs = 4 }
    """))
    (d / "broken.toml").write_text('engine = "vllm"\n[configs.x]\nflags = { "--dash" = 1 }\n')
    result = pytester.runpytest("benchmarks/engines", "-rs", "-p", "no:cacheprovider")
    result.assert_outcomes(skipped=1, failed=1)
    out = result.stdout.str()
    assert "vLLM (CPU) is not installed: run `autotune engine install vllm`" in out
    assert "unusable engine declaration" in out
