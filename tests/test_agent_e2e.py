"""The LLM tuner end to end (docs/guide/llm-tuner.md): a registered study with arms ``llm`` and ``random`` on one problem,
the ``llm`` arm written by a scripted OpenAI-compatible endpoint (tests/llm_endpoint.py) that returns an honest
candidate, a cheat, prose without code and a reply cut off by the token cap. ``autotune search --tuner=llm
--budget=4`` measures each iteration through the same gates as any candidate; the study report reads 1 usable of
4, the cheat refused by correctness, the truncated call flagged by the audit; a canary API key reaches the
endpoint and no file the run wrote.

One module-scoped run (two measuring sessions of the llm arm, one of the random arm: ~25 s on 2 cores) serves
every assertion; the engine flag-space search (the fake engine) is one more test of two sessions."""

from __future__ import annotations

import json
import os
import sqlite3
import sys
from pathlib import Path
from types import SimpleNamespace

import e2e_files as F
import pytest
from llm_endpoint import Endpoint, Scripted
from test_study_e2e import frozen_fast_protocol, git, write

from conftest import REPO, ModuleRequest

CANARY = "sk-canary-e2e-4c0ffee5d00d"
TEMPLATE = '''"""Searchable ReLU (test template)."""
import torch
import torch.nn as nn

AUTOTUNE_SEARCH_SPACE = {"variant": ["relu", "clamp"]}
PARAMS = {"variant": "relu"}


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.relu(x) if PARAMS["variant"] == "relu" else x.clamp_min(0.0)
'''
STUDIES = '''[study.relu-agent]
hypothesis = "An LLM agent writes a faster ReLU than a seeded random search over the ReLU template."
arms = ["llm", "random"]
metric = "best_speedup"
direction = "higher"
min_usable = 1
success_bar = 1.10
pairs = 1
problems = ["relu"]
iterations = 4
markers = { llm = "autotune-llm-tuner/1" }
calls = { llm = "candidates/search/relu-agent/llm/relu/calls.jsonl" }
'''
LOG = "candidates/search/relu-agent/llm/relu/calls.jsonl"


def fenced(code: str) -> str:
    return f"Here is a faster kernel.\n\n```python{code}```\n"


def autotune(pt: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pt.run(sys.executable, "-m", "pytest_autotune.cli", *args, timeout=600)


def session_env(mp: pytest.MonkeyPatch) -> None:
    """The repository's package in every process the run starts (the search, its measuring sessions), and the
    canary key in the environment (its only source)."""
    mp.setenv("PYTHONPATH", os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    mp.setenv("OPENAI_API_KEY", CANARY)
    mp.setenv("NO_PROXY", "127.0.0.1,localhost")


@pytest.fixture(scope="module")
def agent_study(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest):
    mp = pytest.MonkeyPatch()
    try:
        pt = pytest.Pytester(ModuleRequest(request), tmp_path_factory, mp, _ispytest=True)  # type: ignore[arg-type]
        root = pt.path
        session_env(mp)
        frozen_fast_protocol(root, **{"bands.saturation": "1.0"})
        write(root, "suite/relu.py", F.RELU)
        write(root, "suite/templates/relu/variants.py", TEMPLATE)
        write(root, "studies.toml", STUDIES)
        git(root, "init", "-q")
        git(root, "add", "-A")
        git(root, "commit", "-qm", "register the study before any result")
        # the order costs two measuring sessions: each unusable reply is recorded with the next measured candidate
        script = [Scripted("I would fuse the ReLU into the next operator; no code is needed. ({AUTH})"),  # prose
                  Scripted(fenced(F.CAND_RELU_CLAMP)),  # honest
                  Scripted("```python\nimport torch\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n"
                           "        return x.clamp", finish_reason="length"),  # cut off by the token cap
                  Scripted(fenced(F.CAND_IDENTITY))]  # a cheat: returns its input
        with Endpoint(script) as ep:
            llm = autotune(pt, "search", "--tuner=llm", f"--endpoint={ep.url}", "--model=scripted", "--budget=4",
                           "--study=relu-agent", "--arm=llm", "--problem=suite/relu.py", "--max-tokens=256",
                           "--seed=5")
        rnd = autotune(pt, "search", "--tuner=random", "--seed=1", "--budget=1", "--study=relu-agent", "--arm=random",
                       "--problem=suite/relu.py")
        report = autotune(pt, "study", "report", "relu-agent", "--json=report.json", "--plot=study.png")
        yield SimpleNamespace(root=root, requests=ep.requests, llm=llm, rnd=rnd, report=report,
                              rep=json.loads((root / "report.json").read_text()))
    finally:
        mp.undo()


def test_one_usable_of_four_the_cheat_refused_the_truncation_flagged(agent_study):
    s = agent_study
    out = s.llm.stdout.str()
    assert s.llm.ret == 0, out[-4000:] + s.llm.stderr.str()
    assert "usable: 1 of 4 iteration(s)" in out and "PLUMBING SUSPECT" in out
    assert s.rnd.ret == 0 and s.report.ret == 0, s.rnd.stdout.str()[-3000:] + s.report.stdout.str()
    rep = s.rep
    arms = {a["arm"]: a for a in rep["arms"]}
    assert (arms["llm"]["usable"], arms["llm"]["total"]) == (1, 4)
    assert (arms["random"]["usable"], arms["random"]["total"]) == (1, 1)
    points = arms["llm"]["trajectories"][0]["points"]
    assert [p["usable"] for p in points] == [False, True, False, False]
    assert [[(r["verdict"], r["gate"]) for r in p["refusals"]] for p in points] == [
        [("rejected", "reply")], [], [("rejected", "reply")], [("rejected", "correctness")]]
    assert points[0]["refusals"][0]["reason"].startswith("unusable iteration 1: no code")
    assert points[2]["refusals"][0]["reason"].startswith('unusable iteration 3: cut off by the token cap: '
                                                        'finish_reason "length" after 256 completion tokens')
    # the verdict: the llm arm is below the protocol's usable share (never compared), and the audit flags the cap
    assert rep["verdict"].startswith("below usability bar (arm llm: 1 of 4 iterations usable (25%)")
    assert rep["label"] == rep["verdict"] + " [plumbing suspect]" and not rep["exploratory"]
    audit = rep["audits"]["llm"]
    assert audit["overall"]["truncated"] == 1 and audit["overall"]["calls"] == 4 and audit["flagged"]
    # treatment delivery: the arms measured different candidates, and every llm call carries the tuner's marker
    d = rep["delivery"]
    assert d["delivered"] and {a["arm"]: a["calls_with_marker"] for a in d["arms"]}["llm"] == 4
    text = s.report.stdout.str()
    for needle in ("study relu-agent: below usability bar", "arm llm: 1/4 iterations usable",
                   "unusable: 1 rejected by reply; 3 rejected by reply; 4 rejected by correctness",
                   "registration: registered", "SUSPECT: truncation: 1 of 4 calls", "treatment delivery: delivered"):
        assert needle in text, text
    assert (s.root / "study.png").read_bytes()[:4] == b"\x89PNG"


def test_each_prompt_carries_the_earlier_outcomes_and_each_call_is_logged(agent_study):
    s = agent_study
    bodies = [r["body"] for r in s.requests]
    assert len(bodies) == 4 and {b["max_tokens"] for b in bodies} == {256} and {b["seed"] for b in bodies} == {5}
    users = [b["messages"][1]["content"] for b in bodies]
    assert F.RELU.strip() in users[0] and "None yet: this is the first iteration." in users[0]
    assert "iteration 1 (llm_s5_i001): UNUSABLE (gate reply), not measured: no code" in users[1]
    assert "iteration 2 (llm_s5_i002): accepted, " in users[2] and "[95% CI " in users[2]
    assert "x.clamp_min(0.0)" in users[2] and "faster than the best so far (" in users[3]  # the best one's code
    assert "iteration 3 (llm_s5_i003): UNUSABLE (gate reply), not measured: cut off by the token cap" in users[3]
    log = [json.loads(line) for line in (s.root / LOG).read_text().splitlines()]
    assert [r["finish_reason"] for r in log] == ["stop", "stop", "length", "stop"]
    assert [r["iteration"] for r in log] == [1, 2, 3, 4] and all(r["error"] is None for r in log)
    assert all(len(r["request_sha256"]) == 64 and r["usage"]["completion_tokens"] > 0 and r["latency_s"] > 0
               for r in log)
    assert log[2]["usage"]["completion_tokens"] == 256 and log[2]["request"]["messages"] == bodies[2]["messages"]
    # the store: each iteration once, refusals with their digests; the prose and the cut-off reply by gate "reply"
    conn = sqlite3.connect(s.root / ".autotune/results.db")
    rows = conn.execute("SELECT iteration, gate, candidate_sha256 FROM rejections WHERE arm = 'llm' ORDER BY "
                        "iteration").fetchall()
    conn.close()
    assert [(i, g) for i, g, _ in rows] == [(1, "reply"), (3, "reply"), (4, "correctness")]
    assert all(d is not None and len(d) == 64 for _, _, d in rows)


def test_the_canary_key_reached_the_endpoint_and_no_file(agent_study):
    s = agent_study
    assert {r["headers"].get("authorization", r["headers"].get("Authorization")) for r in s.requests} == {
        f"Bearer {CANARY}"}
    needle = CANARY.encode()
    written = [p for p in s.root.rglob("*") if p.is_file()]
    assert len(written) > 10 and any(p.suffix == ".db" for p in written)
    assert [p for p in written if needle in p.read_bytes()] == []
    reply = (s.root / "candidates/search/relu-agent/llm/relu/llm_s5_i001.reply.txt").read_text()
    assert "Bearer [REDACTED]" in reply  # the endpoint echoed the key back; it was redacted before writing
    for run in (s.llm, s.rnd, s.report):
        assert CANARY not in run.stdout.str() + run.stderr.str()


ENGINE = """
engine = "fake"
{model}
[server]
flags = {{ token-delay = 0.002 }}

[workloads.short]
profile = "short"
requests = 4
concurrency = 4
max_tokens = 4
prompt_tokens = [8, 8]

[space]
slots = [1, 2, 4, 8, 16]
token-delay = [0.001, 0.002]
"""


def test_engine_flag_sets_from_the_declared_space(pytester: pytest.Pytester, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch, fast_protocol):
    """``--engine``: a reply is a flag set; one inside the space is an engine item of the study (paired against
    the engine's default through every gate), one outside it an unusable iteration -- both rows of the arm."""
    sys.path.insert(0, str(Path(__file__).parent / "engine_fakes"))
    from support import CONFTEST, model_table, prepare_cache

    monkeypatch.setenv("PYTEST_AUTOTUNE_ENGINE_CACHE", str(prepare_cache(tmp_path / "cache")))
    session_env(monkeypatch)
    root = pytester.path
    pytester.makeconftest(CONFTEST)
    (root / "protocol.toml").write_text(fast_protocol(**{
        "engines.launch_pairs": "1", "engines.windows_per_launch": "8", "engines.warmup_windows": "0", "engines.quality_prompts": "2",
        "engines.quality_max_tokens": "8", "engines.quality_concurrency": "2", "engines.stop_grace_s": "2.0",
        "engines.launch_timeout_s": "30.0", "engines.metrics_interval_s": "0.05"}))
    write(root, "benchmarks/engines/fake.toml", ENGINE.format(model=model_table()))
    script = [Scripted('Fewer slots:\n```json\n{"slots": 2}\n```'), Scripted('```json\n{"gpu-memory": 0.9}\n```')]
    with Endpoint(script) as ep:
        res = autotune(pytester, "search", "--tuner=llm", "--engine=fake", f"--endpoint={ep.url}", "--model=m",
                       "--budget=2", "--study=engine-agent", "--arm=llm", "--", "--autotune-exploratory")
    out = res.stdout.str()
    assert res.ret == 0, out[-4000:] + res.stderr.str()
    assert '"slots": [1, 2, 4, 8, 16]' in ep.requests[0]["body"]["messages"][1]["content"]  # the declared space
    assert "iteration 2 (llm_s0_i002): unusable: --gpu-memory is not in fake's declared flag space" in out
    conn = sqlite3.connect(root / ".autotune/results.db")
    rows = conn.execute("SELECT iteration, candidate, problem, 'accepted', NULL FROM results WHERE study = "
                        "'engine-agent' UNION ALL SELECT iteration, candidate, problem, verdict, gate FROM rejections "
                        "WHERE study = 'engine-agent' ORDER BY 1").fetchall()
    kinds = conn.execute("SELECT DISTINCT kind FROM results WHERE study = 'engine-agent'").fetchall()
    conn.close()
    assert [(i, c, p) for i, c, p, _, _ in rows] == [(1, "llm_s0_i001", "fake:short"), (2, "llm_s0_i002",
                                                                                        "fake:short")], rows
    assert rows[1][3:] == ("rejected", "reply") and kinds in ([], [("engine",)])
    decl = root / "candidates/search/engine-agent/llm/fake-short/llm_s0_i001.toml"
    assert "slots = 2" in decl.read_text()


def test_a_candidate_that_does_not_build_is_unusable_and_the_next_prompt_shows_the_error(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, fast_protocol):
    """The scripted endpoint answers with a C++ extension that does not compile, then with one that does: the first
    iteration is refused by the build gate (unusable, with the compiler's first error), the second prompt shows the
    compiler's output, and the second iteration is accepted (docs/guide/compiled-candidates.md)."""
    from test_build_e2e import CPP_BROKEN, CPP_RELU

    session_env(monkeypatch)
    root = pytester.path
    (root / "protocol.toml").write_text(fast_protocol(**{"probes.max_examples": "0"}))
    write(root, "suite/relu.py", F.RELU)
    script = [Scripted(fenced("\n" + CPP_BROKEN)), Scripted(fenced("\n" + CPP_RELU))]
    with Endpoint(script) as ep:
        res = autotune(pytester, "search", "--tuner=llm", f"--endpoint={ep.url}", "--model=scripted", "--budget=2",
                       "--study=relu-build", "--arm=llm", "--problem=suite/relu.py", "--seed=3", "--",
                       "--autotune-exploratory")
    out = res.stdout.str()
    assert res.ret == 0, out[-4000:] + res.stderr.str()
    assert "usable: 1 of 2 iteration(s)" in out, out[-3000:]
    system, user = ep.requests[1]["body"]["messages"]
    assert "C++ compiled through `torch.utils.cpp_extension.load_inline`" in system["content"]
    assert "iteration 1 (llm_s3_i001): REJECTED by the build gate: main.cpp:3:" in user["content"]
    assert "The compiler's output:" in user["content"] and "error: expected" in user["content"]
    assert "iteration 2 (llm_s3_i002): accepted" in out
    conn = sqlite3.connect(root / ".autotune/results.db")
    rows = conn.execute("SELECT iteration, gate FROM rejections WHERE study = 'relu-build'").fetchall()
    conn.close()
    assert rows == [(1, "build")]
