"""Greedy-output agreement of engine configurations with the engine's default (docs/guide/engines.md#quality-gate).

Launches each configuration once (one server at a time, stopped by the harness's own EngineServer), sends the same
16 seeded prompts (32 answer tokens, temperature 0) at the given concurrency, prints the effective configuration
and the token agreement of every configuration with the first one. Nothing is timed or recorded.

    python benchmarks/harness/engine_quality_probe.py vllm \\
        '{"enforce-eager": true, "dtype": "float32", "max-model-len": 1024}' \\
        '{"default": {}, "bf16": {"dtype": "bfloat16"}, "mns4": {"max-num-seqs": 4},
          "reppen": {"override-generation-config": {"repetition_penalty": 1.3}}}' --concurrency 1 16
    python benchmarks/harness/engine_quality_probe.py llamacpp '{"ctx-size": 16384}' \\
        '{"default": {}, "default2": {}, "q8kv": {"cache-type-k": "q8_0", "cache-type-v": "q8_0"}}' --concurrency 1 16
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from pytest_autotune.engines.adapters import builtin_adapters  # noqa: E402
from pytest_autotune.engines.adapters.base import FlagSet  # noqa: E402
from pytest_autotune.engines.install import cache_root, find_installation  # noqa: E402
from pytest_autotune.engines.item import base_env  # noqa: E402
from pytest_autotune.engines.loadgen import run_window  # noqa: E402
from pytest_autotune.engines.metrics import parse_prometheus  # noqa: E402
from pytest_autotune.engines.model import ModelSpec, make_model  # noqa: E402
from pytest_autotune.engines.quality import token_agreement  # noqa: E402
from pytest_autotune.engines.server import EngineServer  # noqa: E402
from pytest_autotune.engines.workload import PromptBuilder, Workload, build_requests  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("engine")
    ap.add_argument("common", help="JSON: flags of every launch")
    ap.add_argument("configs", help="JSON: name -> flags; the first is the reference")
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1])
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--env", default="{}", help='JSON: extra server environment, e.g. {"VLLM_CPU_KVCACHE_SPACE": "1"}')
    args = ap.parse_args(argv)
    adapter = {a.name: a for a in builtin_adapters()}[args.engine]
    inst = find_installation(adapter)
    if inst is None:
        print(f"install it first: autotune engine install {args.engine}", file=sys.stderr)
        return 2
    model = make_model(ModelSpec(), cache_root() / "models")
    if adapter.model_format == "gguf":
        from pytest_autotune.engines.gguf import ensure_gguf

        model = ensure_gguf(model, inst)
    builder = PromptBuilder(model.path / "tokenizer.json")
    reqs = build_requests(Workload.from_table("short", {"profile": "short"}), args.seed, builder, count=16,
                          max_tokens=32)
    common, configs = json.loads(args.common), json.loads(args.configs)
    answers: dict[tuple[str, int], list[list[int]]] = {}
    logs = Path(tempfile.mkdtemp(prefix="quality-probe-"))
    for name, flags in configs.items():
        fl = FlagSet.of({**common, **flags})
        env = {**base_env(), **adapter.env(inst, logs), "VLLM_CPU_KVCACHE_SPACE": "1", **json.loads(args.env)}
        log = logs / f"{name}.log"
        with EngineServer(lambda port: adapter.command(inst, model, "m", port, fl), env=env, log=log) as s:
            import httpx

            metrics = parse_prometheus(httpx.get(s.base_url + "/metrics", trust_env=False).text)
            eff = adapter.effective_config(s.base_url, log.read_text(errors="replace"), metrics)
            print(f"== {name}: ready in {s.record.started_s:.1f} s; effective: "
                  f"{ {k: v for k, v in eff.values.items() if not k.startswith(('log.system', 'props.params'))} }")
            for c in args.concurrency:
                stats, results = run_window(s.base_url, "m", reqs, concurrency=c, timeout_s=120)
                if stats.errors:
                    print(f"   {stats.errors} errors at concurrency {c}: {stats.first_error}")
                answers[(name, c)] = [builder.ids(r.text) for r in results]
    ref = answers[(next(iter(configs)), args.concurrency[0])]
    for (name, c), ids in answers.items():
        print(f"{name:>12} at {c:>2} in flight: {token_agreement(ref, ids).describe()}")
    print(f"server logs: {logs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
