"""One REAL paired engine comparison in the test suite (docs/guide/engines.md, CI): vLLM's CPU build, its default
against ``--max-num-seqs 4`` on 16 requests in flight, which reads lower (4 sequences per step instead of
16). Two launches of vLLM (~35-90 s each on 2 cores), one server at a time, stopped by the plugin.

Marked ``real_engine``: it runs only with ``PYTEST_AUTOTUNE_REAL_ENGINES=1`` (the root conftest.py), in CI's engine
step after the test suite (``.ci/run``), so that the README's test command stays a ~10 minute suite. It needs
vLLM installed in the engine cache (``autotune engine install vllm``; ``.ci/run`` does it). Without it the test
is skipped, unless ``PYTEST_AUTOTUNE_REQUIRE_ENGINES=1`` (set by ``.ci/run``), which makes a missing engine a
failure: CI must not pass by skipping its only real engine measurement.
"""

from __future__ import annotations

import json
import os
import sys
import textwrap
from pathlib import Path

import httpcore  # noqa: F401
import httpx
import pytest
import safetensors.torch  # noqa: F401
import tokenizers  # noqa: F401

import pytest_autotune.engines.run  # noqa: F401 - imported before pytester snapshots sys.modules (see e2e test)
from pytest_autotune.engines.adapters.vllm import VllmAdapter
from pytest_autotune.engines.install import CACHE_ENV, cache_root, find_installation
from pytest_autotune.store import ResultStore

sys.path.insert(0, str(Path(__file__).parent / "engine_fakes"))
from support import processes_matching  # noqa: E402

httpx.Client(trust_env=False).close()

pytestmark = pytest.mark.real_engine

DECLARATION = """
engine = "vllm"

[model]
seed = 0

[server]
flags = { enforce-eager = true, dtype = "float32", max-model-len = 1024 }
env = { VLLM_CPU_KVCACHE_SPACE = "1" }

[workloads.short]
profile = "short"
requests = 32
concurrency = 16

[configs.max-num-seqs-4]
flags = { max-num-seqs = 4 }
"""


@pytest.fixture(scope="session")
def real_engine_cache():
    """The user's engine cache, read before pytester points HOME at its temporary folder."""
    return cache_root()


@pytest.fixture
def vllm_installed(real_engine_cache, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, str(real_engine_cache))
    if find_installation(VllmAdapter()) is None:
        msg = "vLLM is not installed in the engine cache: autotune engine install vllm"
        if os.environ.get("PYTEST_AUTOTUNE_REQUIRE_ENGINES") == "1":
            pytest.fail(msg + " (PYTEST_AUTOTUNE_REQUIRE_ENGINES=1: CI must measure a real engine)")
        pytest.skip(msg)


def test_vllm_default_vs_max_num_seqs_4_real_paired(vllm_installed, pytester, tmp_path, fast_protocol):
    (pytester.path / "protocol.toml").write_text(fast_protocol(**{
        # one launch pair of 8 windows: the CI-sized measurement (docs/guide/engines.md: pairs, windows, item time)
        "engines.launch_pairs": "1", "engines.windows_per_launch": "8", "engines.quality_prompts": "8",
        # no warm-up window: each launch's 8 quality prompts, answered before its windows, already warm the
        # server (with the warm-up window on, it read 26.5 and 12.2 req/s against measured medians of 27.6 and
        # 12.8; docs/results/cpu.md, suite-time-4); the first measured window is reported like the others
        "engines.warmup_windows": "0",
    }))
    d = pytester.path / "benchmarks" / "engines"
    d.mkdir(parents=True)
    (d / "vllm.toml").write_text(textwrap.dedent(DECLARATION))
    db, rep = tmp_path / "r.db", tmp_path / "r.json"
    result = pytester.runpytest("--autotune", "--autotune-exploratory", "benchmarks/engines", "-p", "no:cacheprovider",
                                f"--autotune-db={db}", f"--autotune-json={rep}")
    out = result.stdout.str()
    report = json.loads(rep.read_text())
    (item,) = report["items"]
    assert item["verdict"] == "accepted", out[-4000:]
    result.assert_outcomes(passed=1)
    # lower: the paired ratio, and a CI that brackets it. The CI's upper end is not asserted: the two launches run
    # one after the other, so a window disturbed by a neighbour on a shared runner lands in one arm only, and with 8
    # pairs the CI reaches the second-largest window ratio (CI of 2026-12-01, before the load generator was placed
    # off the engine's pinned CPU: 0.47x [0.35x, 1.15x]). The point estimate is a median over 8 window pairs, ~0.5x
    # (docs/guide/engines.md#where-the-load-generator-runs); a bound of 0.9 failed once on a correct program, a CI run of
    # 2026-12-03 whose default launch had windows from 15 to 59 req/s read 0.918x. What the test asserts is the
    # direction: fewer sequences at once measure slower, which takes more than half the window pairs disturbed by
    # more than 2x to undo.
    lo, hi = item["ci"]
    assert item["speedup"] < 1.0 and lo <= item["speedup"] <= hi, item
    if len(os.sched_getaffinity(0)) >= 2:  # vLLM pins its worker to a core; the load generator moves off it
        assert "load generator on CPU(s)" in out and "off the engine's pinned CPU(s)" in out, out[-4000:]
    assert "quality gate: token agreement" in out and "treatment delivery: --max-num-seqs: at most 4" in out
    with ResultStore.open(db, readonly=True) as store:
        assert store.verify().ok
        (row,) = store.results()
        prov = json.loads(row["provenance"])
        assert row["kind"] == "engine" and row["problem"] == "vllm:short" and row["n_pairs"] == 8
        assert prov["engine"]["version"].startswith("0.32.0")
        assert prov["arms"]["candidate"]["effective_config"]["values"]["args.max_num_seqs"] == 4
        assert prov["quality"]["min_agreement"] >= 0.95
    assert not processes_matching("vllm.entrypoints.openai.api_server")
    assert not processes_matching("VLLM::EngineCore")
