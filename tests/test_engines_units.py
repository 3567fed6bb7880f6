"""Engine parts that need no server: the tiny model, prompts, the quality gate's arithmetic, treatment delivery,
declarations, the flag-search seam, the protocol's [engines] section, read-back parsers, the launch order."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest

from pytest_autotune.engines.adapters.base import EffectiveConfig, FlagSet, LaunchEvidence, values_equal
from pytest_autotune.engines.adapters.llamacpp import LlamaCppAdapter, parse_startup_log
from pytest_autotune.engines.adapters.sglang import SGLangAdapter
from pytest_autotune.engines.adapters.vllm import VllmAdapter, parse_engine_config, parse_non_default_args
from pytest_autotune.engines.declaration import DeclarationError, load_declaration, parse_declaration
from pytest_autotune.engines.delivery import changed_flags, judge_delivery
from pytest_autotune.engines.metrics import MetricsSnapshot, parse_prometheus
from pytest_autotune.engines.model import ModelSpec, file_sha256, load_model, make_model
from pytest_autotune.engines.quality import judge, token_agreement
from pytest_autotune.engines.run import launch_order
from pytest_autotune.engines.space import config_from_assignment, flag_space, write_search_declaration
from pytest_autotune.engines.workload import PromptBuilder, Workload, build_requests
from pytest_autotune.errors import ProtocolError
from pytest_autotune.protocol import parse_protocol

REPO = Path(__file__).resolve().parents[1]
SMALL = dict(layers=1, hidden=64, heads=2, kv_heads=1, intermediate=128, vocab_size=400, max_position=512,
             corpus_chars=150_000)


@pytest.fixture(scope="module")
def small_model(tmp_path_factory):
    return make_model(ModelSpec(seed=5, **SMALL), tmp_path_factory.mktemp("models"))


# ---------------------------------------------------------------------------------------------- the model


def test_model_is_deterministic_from_its_seed(small_model, tmp_path):
    again = make_model(ModelSpec(seed=5, **SMALL), tmp_path / "a", force=True)
    other = make_model(ModelSpec(seed=6, **SMALL), tmp_path / "b")
    assert again.digest == small_model.digest and again.files == small_model.files
    assert other.digest != small_model.digest
    assert other.files["tokenizer.json"] != small_model.files["tokenizer.json"]  # trained on another corpus
    cfg = json.loads((small_model.path / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLM"] and cfg["num_hidden_layers"] == 1
    tok_cfg = json.loads((small_model.path / "tokenizer_config.json").read_text())
    assert "<|start|>" in tok_cfg["chat_template"] and tok_cfg["bos_token"] == "<|begin_of_text|>"
    assert small_model.spec.n_params() > 0


def test_a_changed_model_file_is_not_reused(small_model, tmp_path):
    copy = make_model(ModelSpec(seed=5, **SMALL), tmp_path)
    weights = copy.path / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-8] + b"\0" * 8)
    assert load_model(copy.path) is None  # a tampered or truncated file: made again, never served
    remade = make_model(ModelSpec(seed=5, **SMALL), tmp_path)
    assert file_sha256(remade.path / "model.safetensors") == small_model.files["model.safetensors"]


def test_model_spec_is_validated():
    with pytest.raises(ValueError, match="multiple of heads"):
        ModelSpec(hidden=100, heads=3)


# ---------------------------------------------------------------------------------------------- prompts


def test_the_paired_seed_decides_the_prompts(small_model):
    b = PromptBuilder(small_model.path / "tokenizer.json")
    wl = Workload.from_table("short", {"profile": "short", "requests": 12, "prompt_tokens": [10, 20]})
    a1, a2, other = build_requests(wl, 7, b), build_requests(wl, 7, b), build_requests(wl, 8, b)
    assert a1 == a2 and a1 != other
    lengths = [b.count(r.prompt) for r in a1]
    assert all(8 <= n <= 22 for n in lengths), lengths  # cut to the token count (a boundary may merge)
    assert all(r.max_tokens == 32 and r.ignore_eos for r in a1)
    shared = Workload.from_table("sp", {"profile": "shared-prefix", "requests": 5, "shared_prefix_tokens": 64})
    reqs = build_requests(shared, 3, b)
    prefix = reqs[0].prompt.split("\n\n")[0]
    assert len(prefix) > 50 and all(r.prompt.startswith(prefix + "\n\n") for r in reqs)
    assert len({r.prompt for r in reqs}) == 5
    chat = Workload.from_table("c", {"profile": "short", "api": "chat", "requests": 2})
    assert build_requests(chat, 1, b)[0].messages[0][0] == "user"


def test_workload_digest_and_validation():
    a = Workload.from_table("short", {"profile": "short"})
    b = Workload.from_table("short", {"profile": "short", "requests": 65})
    assert a.digest() != b.digest() and len(a.digest()) == 64
    with pytest.raises(ValueError, match="profile 'nope'"):
        Workload.from_table("x", {"profile": "nope"})
    with pytest.raises(ValueError, match="unknown key 'request'"):
        Workload.from_table("short", {"request": 3})
    with pytest.raises(ValueError, match="prompt_tokens"):
        Workload.from_table("short", {"prompt_tokens": [9, 3]})


# ---------------------------------------------------------------------------------------------- quality gate


def test_token_agreement_properties():
    ref = [[1, 2, 3, 4], [5, 6, 7, 8]]
    assert token_agreement(ref, ref).value == 1.0
    same_len_one_diff = token_agreement(ref, [[1, 2, 3, 9], [5, 6, 7, 8]])
    assert same_len_one_diff.value == pytest.approx(7 / 8) and same_len_one_diff.first_divergence == (0, 3)
    truncated = token_agreement(ref, [[1, 2], [5, 6, 7, 8]])  # a shorter answer never agrees on what it lacks
    assert truncated.value == pytest.approx(6 / 8)
    longer = token_agreement(ref, [[1, 2, 3, 4, 0, 0], [5, 6, 7, 8]])
    assert longer.value == pytest.approx(8 / 10)
    assert judge(ref, [[1, 2, 3, 9], [5, 6, 7, 8]], 0.95, 2).passed is False
    assert judge(ref, ref, 0.95, 2).passed is True
    with pytest.raises(ValueError):
        token_agreement(ref, ref[:1])


# ---------------------------------------------------------------------------------------------- delivery


def _ev(values: dict, metrics: str = "", maxima: dict | None = None, before: str = "") -> LaunchEvidence:
    return LaunchEvidence(EffectiveConfig(values), parse_prometheus(before) if before else MetricsSnapshot(),
                          parse_prometheus(metrics) if metrics else MetricsSnapshot(), maxima or {}, 64,
                          Workload.from_table("short", {"profile": "short"}))


def test_vllm_delivery_judgements():
    a = VllmAdapter()
    base = FlagSet.of({"enforce-eager": True})
    default = _ev({"args.enforce_eager": True, "engine.enable_prefix_caching": "True"})
    # --max-num-seqs 4: parsed, and at most 4 ran while others waited
    cfg = base.merged(FlagSet.of({"max-num-seqs": 4}))
    ok = judge_delivery(a, base, cfg, default, _ev({"args.max_num_seqs": 4},
                                                   maxima={"vllm:num_requests_running": 4, "vllm:num_requests_waiting": 12}))
    assert ok.delivered and ok.findings[0].delivered is True
    over = judge_delivery(a, base, cfg, default, _ev({"args.max_num_seqs": 4},
                                                     maxima={"vllm:num_requests_running": 16}))
    assert not over.delivered and "16 requests ran at once" in over.reason
    ignored = judge_delivery(a, base, cfg, default, _ev({}))
    assert not ignored.delivered and "did not take the flag" in ignored.reason
    # speculation that never drafts
    spec = base.merged(FlagSet.of({"speculative-config": {"method": "ngram", "prompt_lookup_min": 900}}))
    metrics = "# TYPE vllm:spec_decode_num_drafts counter\nvllm:spec_decode_num_drafts_total 0\n"
    nd = judge_delivery(a, base, spec, default, _ev({"engine.speculative_config": "SpeculativeConfig(method='ngram')"},
                                                    metrics, before=metrics))
    assert not nd.delivered and nd.reason.startswith("treatment not delivered") and "0 drafts" in nd.reason
    drafted = "# TYPE vllm:spec_decode_num_drafts counter\nvllm:spec_decode_num_drafts_total 120\n"
    assert judge_delivery(a, base, spec, default, _ev({"engine.speculative_config": "x"}, drafted, before=metrics)
                          ).delivered
    # prefix caching off, but hits: not what was asked
    off = base.merged(FlagSet.of({"enable-prefix-caching": False}))
    hits = "# TYPE vllm:prefix_cache_hits counter\nvllm:prefix_cache_hits_total 512\n"
    assert not judge_delivery(a, base, off, default, _ev({"engine.enable_prefix_caching": "False"}, hits)).delivered
    # identical arms
    assert not judge_delivery(a, base, base, default, default).delivered


def test_identical_effective_configuration_is_not_delivered():
    a = LlamaCppAdapter()
    base = FlagSet.of({"ctx-size": 4096})
    cfg = base.merged(FlagSet.of({"cont-batching": True}))  # on by default: nothing changes
    same = {"props.total_slots": 4, "log.ctx.n_batch": "2048"}
    v = judge_delivery(a, base, cfg, _ev(same), _ev(same))
    assert not v.delivered and "identical to the default's" in v.reason
    v = judge_delivery(a, base, base.merged(FlagSet.of({"parallel": 4})), _ev(same), _ev(same))
    assert not v.delivered and "already runs 4 slots" in v.reason
    v = judge_delivery(a, base, base.merged(FlagSet.of({"ubatch-size": 128})), _ev({"log.ctx.n_ubatch": "512"}),
                       _ev({"log.ctx.n_ubatch": "128"}))
    assert v.delivered
    assert changed_flags(base, cfg) == {"cont-batching": True}


def test_read_back_parsers():
    log = ("(APIServer pid=1) INFO [api_utils.py:286] non-default args: {'host': '127.0.0.1', 'max_num_seqs': 4, "
           "'enforce_eager': True, 'speculative_config': {'method': 'ngram'}}\n"
           "(EngineCore pid=2) INFO [core.py:133] Initializing a V1 LLM engine (v0.32.0) with config: model='/m', "
           "speculative_config=SpeculativeConfig(method='ngram', num_spec_tokens=4), dtype=torch.float32, "
           "enable_prefix_caching=True, compilation_config={'mode': <CompilationMode.NONE: 0>, 'x': [1, 2]}, seed=0\n")
    assert parse_non_default_args(log) == {"host": "127.0.0.1", "max_num_seqs": 4, "enforce_eager": True,
                                           "speculative_config": {"method": "ngram"}}
    eng = parse_engine_config(log)
    assert eng["enable_prefix_caching"] == "True" and eng["dtype"] == "torch.float32" and eng["seed"] == "0"
    assert eng["speculative_config"].startswith("SpeculativeConfig(")
    ll = parse_startup_log("llama_context: n_ubatch              = 512\n"
                           "llama_kv_cache: size = 1 MiB (2048 cells), K (q8_0): 0.5 MiB, V (f16): 0.5 MiB\n"
                           "system_info: n_threads = 2 (n_threads_batch = 2) / 2 | AVX2 = 1 |\n")
    assert ll["log.ctx.n_ubatch"] == "512" and ll["log.type_k"] == "q8_0" and ll["log.type_v"] == "f16"
    assert ll["log.n_threads"] == "2"
    snap = parse_prometheus('# TYPE vllm:cache_config_info gauge\nvllm:cache_config_info{cache_dtype="auto",'
                            'engine="0"} 1.0\n# TYPE x counter\nx_total{a="1"} 2\nx_total{a="2"} 3\n')
    assert snap.total("x") == 5 and snap.labels_of("vllm:cache_config_info")[0]["cache_dtype"] == "auto"
    assert values_equal("4", 4) and values_equal("True", True) and values_equal('{"a": 1}', {"a": 1.0})
    assert not values_equal("auto", "fp8")


def test_adapters_render_flags_and_commands(small_model, tmp_path):
    from pytest_autotune.engines.install import Installation

    inst = Installation("vllm", tmp_path, "0.32.0", "x", "now", {"python": "/py", "cache": str(tmp_path)})
    argv = VllmAdapter().command(inst, small_model, "m", 1234, FlagSet.of(
        {"max-num-seqs": 4, "enable-prefix-caching": False, "speculative-config": {"method": "ngram"}}))
    assert argv[:3] == ["/py", "-m", "vllm.entrypoints.openai.api_server"]
    assert argv[argv.index("--host") + 1] == "127.0.0.1" and "--no-enable-prefix-caching" in argv
    assert argv[argv.index("--speculative-config") + 1] == '{"method":"ngram"}'
    sg = SGLangAdapter()
    assert sg.untested_reason and "AVX-512" in sg.untested_reason
    assert sg.render(FlagSet.of({"disable-radix-cache": True, "enable-x": False})) == ["--disable-radix-cache"]


# ---------------------------------------------------------------------------------------------- declarations


def test_shipped_declarations_load():
    for name in ("vllm", "llamacpp"):
        d = load_declaration(REPO / "benchmarks" / "engines" / f"{name}.toml")
        assert d.engine == name and d.configs and d.space
        assert {c.expect_refusal for c in d.configs.values()} >= {"quality", "delivery"}
        for c in d.configs.values():
            assert changed_flags(d.default_flags(), d.flags_of(c)), c.name


@pytest.mark.parametrize("text, message", [
    ('engine = "vllm"\nbogus = 1\n[configs.a]\nflags = {x = 1}\n', "unknown key 'bogus'"),
    ('engine = "vllm"\n[workloads.short]\n[configs.default]\nflags = {x = 1}\n', "'default' is the engine's default"),
    ('engine = "vllm"\n[workloads.short]\n[configs.a]\nflags = {"--x" = 1}\n', "without dashes"),
    ('engine = "vllm"\n[workloads.short]\n[configs.a]\nflags = {port = 1}\n', "set by pytest-autotune"),
    ('engine = "vllm"\n[workloads.short]\n[configs.a]\nflags = {x = 1}\nraw = ["--host", "0.0.0.0"]\n',
     "would override what pytest-autotune sets"),
    ('engine = "vllm"\n[workloads.short]\n[configs.a]\nflags = {x = 1}\nworkloads = ["t"]\n', "workload 't'"),
    ('engine = "vllm"\n[workloads.short]\n[configs.a]\nflags = {}\n', "sets no flag"),
    ('engine = "vllm"\n[workloads.short]\n[configs.a]\nflags = {x = 1}\nexpect = "fail"\n', "expect must be"),
    ('engine = "vllm"\n[configs.a]\nflags = {x = 1}\n', "at least one workload"),
])
def test_declaration_errors_name_the_fix(text, message):
    import tomllib

    with pytest.raises(DeclarationError, match=message):
        parse_declaration(tomllib.loads(text), Path("d.toml"))


# ---------------------------------------------------------------------------------------------- search seam


def test_flag_space_seam(tmp_path):
    decl = load_declaration(REPO / "benchmarks" / "engines" / "vllm.toml")
    space = flag_space(decl)
    draws = [space.sample(random.Random(11)) for _ in range(2)]
    assert draws[0] == draws[1]  # the tuner's seed decides the draw
    assert space.sample(random.Random(12)) != draws[0] or space.size() == 1
    cfg = config_from_assignment(decl, draws[0])
    assert cfg.name.startswith("search-") and len(cfg.name) == len("search-") + 12
    assert config_from_assignment(decl, draws[0]).name == cfg.name  # named by its digest
    with pytest.raises(ValueError, match="not in vllm's declared flag space"):
        config_from_assignment(decl, {"tensor-parallel-size": 2})
    with pytest.raises(ValueError, match="not one of its declared choices"):
        config_from_assignment(decl, {"max-num-seqs": 3})
    out = write_search_declaration(decl, [cfg], tmp_path / "search.toml")
    again = load_declaration(out)
    assert list(again.configs) == [cfg.name] and again.configs[cfg.name].flags == cfg.flags
    assert again.server_flags == decl.server_flags and again.workloads == decl.workloads


# ---------------------------------------------------------------------------------------------- protocol, order


def test_protocol_engines_section_is_checked():
    text = (REPO / "protocol.toml").read_text()
    p = parse_protocol(text.encode())
    assert p.engines.quality_min_agreement == 0.95
    assert p.engines.launch_pairs * p.engines.windows_per_launch >= p.timing.min_pairs
    bad = re.sub(r"(?m)^windows_per_launch = \d+", "windows_per_launch = 2", text)
    assert bad != text
    with pytest.raises(ProtocolError, match="below \\[timing\\].min_pairs"):
        parse_protocol(bad.encode())
    with pytest.raises(ProtocolError, match="engines.quality_min_agreement"):
        parse_protocol(text.replace("quality_min_agreement = 0.95", "quality_min_agreement = 1.5").encode())


def test_launch_order_alternates():
    assert launch_order(2) == [(0, "default"), (0, "config"), (1, "config"), (1, "default")]
    assert [a for _, a in launch_order(3)] == ["default", "config", "config", "default", "default", "config"]
