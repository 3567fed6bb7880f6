"""The LLM tuner's parts without a measuring session (docs/guide/llm-tuner.md): reading replies, the client's retries,
timeout and log against the scripted endpoint, the key's redaction, the token budget, the prompts, the manifest's
unusable entries. Each test runs in well under a second."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from llm_endpoint import Endpoint, Scripted

from pytest_autotune.errors import AutotuneUsageError
from pytest_autotune.protocol import find_protocol, load_protocol
from pytest_autotune.study.agent.calls import CallLog, Redactor, public_endpoint
from pytest_autotune.study.agent.client import CallResult, ChatClient, ClientSettings
from pytest_autotune.study.agent.history import IterationOutcome
from pytest_autotune.study.agent.loop import AgentSearch, scrubbed_env
from pytest_autotune.study.agent.prompt import MARKER, engine_messages, kernel_messages
from pytest_autotune.study.agent.replies import extract_code, extract_flags, judge_call
from pytest_autotune.study.audit import audit_file
from pytest_autotune.study.search.manifest import load_manifest, write_manifest
from pytest_autotune.study.search.tuners import tuner_class

CANARY = "sk-canary-unit-7f3a9c1e55d2"
STUDIES = load_protocol(find_protocol(Path(__file__).resolve().parents[1])).studies

CODE = "import torch\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return x\n"


def test_code_is_read_from_the_reply_never_run():
    code, why = extract_code(f"Faster:\n```python\n{CODE}```\nand a helper:\n```python\nprint(1)\n```\n")
    assert code == CODE and why is None  # the block that defines ModelNew, not the last one
    assert extract_code(f"```\n{CODE}```")[0] == CODE  # an unlabelled fence
    assert extract_code(CODE)[0] == CODE  # a bare module that parses and defines ModelNew
    code, why = extract_code("```python\nimport torch\n```")
    assert code == "import torch\n" and why is None  # code without ModelNew: the load gate says what it lacks
    code, why = extract_code("Use torch.relu; it is already optimal.")
    assert code is None and why.startswith("no code: the reply (38 characters)")
    code, why = extract_code("```python\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return x.")
    assert code is None and "no code" in why  # an unclosed fence is no block


def test_flag_sets_must_stay_inside_the_declared_space():
    space = {"max-num-seqs": [4, 8, 16], "enable-prefix-caching": [True, False]}
    assert extract_flags('```json\n{"max-num-seqs": 8}\n```', space, "vllm") == ({"max-num-seqs": 8}, None)
    assert extract_flags('I pick {"--enable-prefix-caching": false}.', space, "vllm") == (
        {"enable-prefix-caching": False}, None)
    flags, why = extract_flags('{"tensor-parallel-size": 2}', space, "vllm")
    assert flags is None and why.startswith("--tensor-parallel-size is not in vllm's declared flag space")
    assert "not one of its declared choices [4, 8, 16]" in extract_flags('{"max-num-seqs": 5}', space, "vllm")[1]
    assert "not one of" in extract_flags('{"enable-prefix-caching": 1}', space, "vllm")[1]  # 1 is not true
    assert "empty" in extract_flags("```json\n{}\n```", space, "vllm")[1]
    assert extract_flags("more sequences", space, "vllm")[1].startswith("no flag set")


def _result(**kw) -> CallResult:
    base = dict(content="x", finish_reason="stop", usage={"completion_tokens": 5}, error=None, status=200,
                latency_s=0.1, request_sha256="0" * 64, attempts=1, log_line=1)
    return CallResult(**{**base, **kw})


def test_a_cut_off_failed_or_empty_call_is_unusable():
    assert judge_call(_result(), 64) is None
    assert judge_call(_result(finish_reason="length", usage={"completion_tokens": 64}), 64).startswith(
        'cut off by the token cap: finish_reason "length" after 64 completion tokens (--max-tokens=64)')
    assert judge_call(_result(content=None, error="HTTP 500: boom", attempts=4), 64) == (
        "the model call failed after 4 attempt(s): HTTP 500: boom")
    assert judge_call(_result(content="  "), 64).startswith("the reply is empty")


def _client(ep: Endpoint, log: Path, **kw) -> ChatClient:
    settings = ClientSettings(endpoint=ep.url, model="m", max_tokens=64, temperature=0.0, seed=1, **kw)
    return ChatClient(settings, CallLog(log, Redactor.of([CANARY])), CANARY, sleep=lambda s: None)


def test_retries_on_5xx_and_transport_timeouts_each_attempt_logged(tmp_path):
    log = tmp_path / "calls.jsonl"
    script = [Scripted(status=503), Scripted("ok"),  # retried, then answered
              Scripted(status=400),  # not retried
              Scripted("late", delay_s=0.5), Scripted("late", delay_s=0.5)]  # per-call timeout, retried once
    with Endpoint(script) as ep:
        client = _client(ep, log, timeout_s=0.3, retries=1)
        ok = client.complete([{"role": "user", "content": "hi"}], {"arm": "llm", "iteration": 1})
        bad = client.complete([{"role": "user", "content": "hi"}], {"arm": "llm", "iteration": 2})
        slow = client.complete([{"role": "user", "content": "hi"}], {"arm": "llm", "iteration": 3})
    assert (ok.content, ok.error, ok.attempts, ok.status) == ("ok", None, 2, 200)
    assert bad.attempts == 1 and bad.error.startswith("HTTP 400: scripted HTTP 400") and bad.content is None
    assert slow.attempts == 2 and slow.error.startswith("timeout: no answer within the per-call timeout of 0.3 s")
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert [len(r["attempts"]) for r in records] == [2, 1, 2]
    assert records[0]["attempts"][0]["status"] == 503 and records[0]["finish_reason"] == "stop"
    assert records[0]["request"]["max_tokens"] == 64 and len(records[0]["request_sha256"]) == 64
    assert records[0]["usage"]["completion_tokens"] >= 1 and records[0]["latency_s"] > 0
    # the audit reads the log as it is: one error and one timeout among three calls
    audit = audit_file(log, STUDIES)
    assert (audit.overall.calls, audit.overall.errors, audit.overall.timeouts) == (3, 1, 1) and audit.flagged
    # the key went to the endpoint, in the Authorization header only, and is in no record
    assert {r["headers"].get("authorization", r["headers"].get("Authorization")) for r in ep.requests} == {
        f"Bearer {CANARY}"}
    assert CANARY not in log.read_text()


def test_a_key_the_endpoint_echoes_back_is_redacted(tmp_path):
    log = tmp_path / "calls.jsonl"
    with Endpoint([Scripted("your key: {AUTH}")]) as ep:
        r = _client(ep, log).complete([{"role": "user", "content": "hi"}], {})
    assert CANARY in (r.content or "")  # the reply held it ...
    assert CANARY not in log.read_text() and "Bearer [REDACTED]" in log.read_text()  # ... the log does not
    assert Redactor.of([CANARY]).text(json.dumps({"k": CANARY})) == '{"k": "[REDACTED]"}'
    assert public_endpoint("https://user:pw@api.example.com:8443/v1?key=abc#x") == "https://api.example.com:8443/v1"


def test_the_key_comes_from_the_environment_only(monkeypatch):
    llm = tuner_class("llm")
    assert llm.adaptive and llm.writes_code
    with pytest.raises(AutotuneUsageError, match="--model=NAME is required"):
        llm(0, {"endpoint": "http://127.0.0.1:1/v1"})
    with pytest.raises(AutotuneUsageError, match="give the base URL"):
        llm(0, {"endpoint": "127.0.0.1:1", "model": "m"})
    monkeypatch.delenv("MY_KEY", raising=False)
    with pytest.raises(AutotuneUsageError, match="the environment variable MY_KEY is not set"):
        llm(0, {"endpoint": "http://127.0.0.1:1/v1", "model": "m", "api_key_env": "MY_KEY"}).key()
    monkeypatch.setenv("MY_KEY", CANARY)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-other")
    monkeypatch.setenv("SAME_VALUE", CANARY)
    assert llm(0, {"endpoint": "http://127.0.0.1:1/v1", "model": "m", "api_key_env": "MY_KEY"}).key() == CANARY
    env = scrubbed_env("MY_KEY")  # what the measuring sessions get
    assert not {"MY_KEY", "OPENAI_API_KEY", "SAME_VALUE"} & set(env) and CANARY not in env.values()


class _Target:
    problem, kind = "relu", "kernel"

    def messages(self, history, iteration, position, budget, max_tokens):
        return [{"role": "user", "content": f"iteration {iteration}"}]

    def parse(self, text):
        return extract_code(text)


def test_the_token_budget_stops_calls_and_records_the_rest_as_not_attempted(tmp_path):
    calls = []

    def complete(messages, meta):
        calls.append(meta["iteration"])
        return _result(content=f"```python\n{CODE}```", usage={"prompt_tokens": 600, "completion_tokens": 400})

    log = CallLog(tmp_path / "calls.jsonl")
    log.append({"study": "s", "arm": "llm", "usage": {"prompt_tokens": 300, "completion_tokens": 200}})
    log.append({"study": "other", "usage": {"prompt_tokens": 10**6, "completion_tokens": 0}})  # not this study's
    search = AgentSearch(root=tmp_path, target=_Target(), complete=complete,  # type: ignore[arg-type]
                         settings=ClientSettings("http://x/v1", "m"), log=log, redactor=Redactor(), study="s",
                         arm="llm", budget=3, seed=0, first_iteration=1, db=tmp_path / "db", device="cpu",
                         token_budget=2000)
    spent = log.spent("s")
    assert spent.total == 500
    replies = [search._ask(i, i, f"n{i}", spent)[0] for i in (1, 2, 3)]
    assert calls == [1, 2] and spent.total == 2500  # the second call started below the budget
    assert replies[0].artifact == CODE and replies[1].unusable is None
    assert replies[2].unusable == ("not attempted: the study's token budget (2000) was spent (2500 tokens) before "
                                   "this iteration")


def test_the_prompt_holds_the_problem_the_baselines_and_every_outcome(tmp_path):
    problem = tmp_path / "relu.py"
    problem.write_text("class Model: ...\n")
    history = [IterationOutcome(1, "llm_s0_i001", "accepted", None, "", 1.25, (1.2, 1.3), "fused", 1e-4, 1.25e-4,
                                CODE),
               IterationOutcome(2, "llm_s0_i002", "rejected", "correctness", "seed 1: 5 of 10 elements outside"),
               IterationOutcome(3, "llm_s0_i003", "unusable", "reply", "no code: the reply (3 characters) ...")]
    system, user = kernel_messages(problem=problem, problem_rel="suite/relu.py", device="cpu",
                                   baselines=[("fused", "suite/baselines/relu/fused.py", "class ModelNew: ...\n")],
                                   history=history, iteration=4, position=4, budget=4, max_tokens=512)
    assert MARKER in system["content"] and "cut off at 512 tokens" in system["content"]
    text = user["content"]
    for needle in ("class Model: ...", "`fused` (suite/baselines/relu/fused.py)",
                   "iteration 1 (llm_s0_i001): accepted, 1.250x [95% CI 1.200, 1.300] against the frozen baseline "
                   "fused (100 µs per call against 125 µs)",
                   "iteration 2 (llm_s0_i002): REJECTED by the correctness gate: seed 1: 5 of 10",
                   "iteration 3 (llm_s0_i003): UNUSABLE (gate reply), not measured: no code",
                   f"Best so far: iteration 1, 1.250x. Its code:\n```python\n{CODE.rstrip()}\n```",
                   "faster than the best so far (1.250x, iteration 1)"):
        assert needle in text, needle
    _, user = engine_messages(engine="vllm", description="d", server_flags={"dtype": "float32"},
                              workload={"name": "short"}, space={"max-num-seqs": [4, 8]}, history=[], iteration=1,
                              position=1, budget=2, max_tokens=64)
    assert '{\n "max-num-seqs": [4, 8]\n}' in user["content"] and "None yet" in user["content"]
    assert "faster than the engine's default." in user["content"]


def test_unusable_manifest_entries_round_trip(tmp_path):
    (tmp_path / "a.reply.txt").write_text("prose")
    import hashlib

    digest = hashlib.sha256(b"prose").hexdigest()
    write_manifest(tmp_path / "m.json", {"study": "s", "arm": "llm", "tuner": "llm", "candidates": [
        {"problem": "vllm:short", "name": "a", "iteration": 3, "sha256": digest, "path": "a.reply.txt",
         "unusable": "no flag set", "kind": "engine"}]})
    m = load_manifest(tmp_path / "m.json")
    (e,) = m.unusable
    assert (e.iteration, e.unusable, e.kind) == (3, "no flag set", "engine")
    m.check_files()
    (tmp_path / "a.reply.txt").write_text("edited")
    with pytest.raises(AutotuneUsageError, match="changed since autotune search generated it"):
        m.check_files()


def test_the_registered_agent_study_names_the_tuners_log_and_marker():
    """studies.toml's softmax-agent: arms llm and random on a problem with a search template; the llm arm's
    registered log is where ``autotune search --tuner=llm`` writes it by default, and its marker is the prompt's."""
    from pytest_autotune.study.registry import StudyEntry, read_entry
    from pytest_autotune.study.search.runner import default_out
    from pytest_autotune.study.search.space import find_template

    repo = Path(__file__).resolve().parents[1]
    _, raw = read_entry(repo, "studies.toml", "study", "softmax-agent")
    e = StudyEntry.parse("softmax-agent", raw, "studies.toml")
    assert e.arms == ("llm", "random") and e.problems == ("05_softmax",)
    problem = repo / "benchmarks/kernels/level1/05_softmax.py"
    assert find_template(problem).is_file()
    assert e.calls["llm"] == (default_out("softmax-agent", "llm") / "05_softmax" / "calls.jsonl").as_posix()
    assert e.markers == {"llm": MARKER}
