"""SGLang — written to its documented CLI, native API and production metrics; UNTESTED here.

Why untested (docs/guide/engines.md): SGLang's PyPI wheel is built for CUDA, and its CPU backend needs AVX-512 (the
development machines have AVX2 only); the GPU machine has neither SGLang nor network access. The adapter is what
the documentation describes, so that a machine that can run SGLang measures it like the others:

* launch: ``python -m sglang.launch_server --model-path DIR --served-model-name NAME --host 127.0.0.1 --port N
  --enable-metrics`` (docs.sglang.io, "Server Arguments"); health ``/health``;
* effective configuration: ``GET /get_server_info`` (``/server_info`` in newer releases), which returns the
  resolved server arguments and ``internal_states`` (docs.sglang.io, "SGLang Native APIs");
* delivery evidence, ``/metrics`` with ``--enable-metrics`` (docs.sglang.io, "Production Metrics"):
  ``sglang:num_running_reqs`` / ``sglang:num_queue_reqs`` (``--max-running-requests``),
  ``sglang:cached_tokens_total`` / ``sglang:cache_hit_rate`` (radix cache), ``sglang:spec_accept_length``
  and ``internal_states[0].avg_spec_accept_length`` (``--speculative-algorithm``).
"""

from __future__ import annotations

import platform
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import httpx

from ...hostinfo import cpuinfo
from .. import localhttp
from .base import EffectiveConfig, EngineAdapter, Finding, FlagSet, FlagValue, LaunchEvidence, values_equal

if TYPE_CHECKING:  # pragma: no cover
    from ..install import Installation, Runner
    from ..metrics import MetricsSnapshot
    from ..model import MadeModel

PACKAGE = "sglang[all]"
UNTESTED = ("SGLang's PyPI wheel is CUDA-only and its CPU backend needs AVX-512; this machine has neither a "
            "CUDA GPU nor AVX-512, and the project's GPU machine has no SGLang and no network")


def _cpu_flags() -> set[str]:
    return set(cpuinfo().get("flags", "").split())


def _has_cuda_gpu() -> bool:
    return Path("/dev/nvidiactl").exists() or Path("/proc/driver/nvidia/version").exists()


class SGLangAdapter(EngineAdapter):
    name: ClassVar[str] = "sglang"
    title: ClassVar[str] = "SGLang"
    untested_reason: ClassVar[str] = UNTESTED
    health_path: ClassVar[str] = "/health"
    load_gauges: ClassVar[tuple[str, ...]] = ("sglang:num_running_reqs", "sglang:num_queue_reqs")

    def install_unsupported_reason(self) -> str:
        if platform.system() != "Linux":
            return "SGLang serves on Linux only"
        if not _has_cuda_gpu() and "avx512f" not in _cpu_flags():
            return ("SGLang cannot run on this machine: its PyPI wheel needs a CUDA GPU and its CPU backend "
                    "AVX-512 (this CPU has neither); measure SGLang on a machine that has one of them")
        return ""

    def recipe(self) -> str:
        return f"venv; pip install {PACKAGE}"

    def build(self, root: Path, run: "Runner") -> dict[str, Path]:
        import sys

        venv = root / "venv"
        py = venv / "bin" / "python"
        if not py.exists():
            run.run([sys.executable, "-m", "venv", venv], what="create the venv")
        run.run([py, "-m", "pip", "install", "--quiet", "--upgrade", "pip"], what="upgrade pip")
        run.run([py, "-m", "pip", "install", "--quiet", PACKAGE], what=f"pip install {PACKAGE}")
        return {"python": py}

    def check_installation(self, inst: "Installation") -> str:
        import subprocess

        from ..install import EngineInstallError

        py = inst.path("python")
        out = subprocess.run([str(py), "-c", "import sglang; print(sglang.__version__)"], capture_output=True,
                             text=True, timeout=300)
        if out.returncode != 0:
            raise EngineInstallError(f"importing sglang in {py} failed: {out.stderr.strip()[-400:]}")
        return out.stdout.strip().split()[-1]

    def command(self, inst: "Installation", model: "MadeModel", served_name: str, port: int,
                flags: FlagSet) -> list[str]:
        return [str(inst.path("python")), "-m", "sglang.launch_server", "--model-path", str(model.path),
                "--served-model-name", served_name, "--host", "127.0.0.1", "--port", str(port), "--enable-metrics",
                *self.render(flags)]

    def env(self, inst: "Installation", workdir: Path) -> dict[str, str]:
        return {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONUNBUFFERED": "1",
                "SGLANG_DISABLE_REQUEST_LOGGING": "1"}

    def render_flag(self, name: str, value: FlagValue) -> list[str]:
        # SGLang's switches are store_true flags named --enable-X / --disable-X; a False value is spelled by
        # the declaration with the other name (disable-radix-cache = true)
        if value is False:
            return []
        return super().render_flag(name, value)

    def effective_config(self, base_url: str, log_text: str, metrics: "MetricsSnapshot") -> EffectiveConfig:
        info: dict[str, Any] = {}
        source = ""
        with localhttp.client(timeout=10.0) as c:
            for path in ("/get_server_info", "/server_info"):
                try:
                    r = c.get(base_url + path)
                except httpx.HTTPError:
                    continue
                if r.status_code == 200:
                    info = r.json()
                    source = path
                    break
        values: dict[str, Any] = {}
        for k, v in info.items():
            if k == "internal_states" or isinstance(v, (dict, list)):
                continue
            values[f"args.{k}"] = v
            values[f"server.{k}"] = v
        return EffectiveConfig(values, str(info.get("version", "")), (source,) if source else ())

    def compared_keys(self, cfg: EffectiveConfig) -> dict[str, Any]:
        return {k: v for k, v in cfg.values.items() if k.startswith("server.")}

    def findings(self, flag: str, value: FlagValue, evidence: LaunchEvidence,
                 default: LaunchEvidence) -> Finding:
        key = flag.replace("-", "_")
        eff = evidence.effective
        if key == "max_running_requests":
            base = super().findings(flag, value, evidence, default)
            if base.delivered is False:
                return base
            peak = evidence.gauge_maxima.get("sglang:num_running_reqs")
            if peak is not None and peak > float(value):
                return Finding(flag, False, f"{peak:g} requests ran at once, more than {value}")
            return Finding(flag, True if peak is not None else None, f"at most {peak} running (sglang:num_running_reqs)")
        if key == "disable_radix_cache":
            cached = evidence.delta("sglang:cached_tokens")
            if value is True and cached:
                return Finding(flag, False, f"radix cache disabled but {cached:g} tokens were served from cache")
            return Finding(flag, True, f"{cached or 0:g} cached tokens (sglang:cached_tokens_total)")
        if key == "speculative_algorithm":
            got = eff.get("server.speculative_algorithm")
            if got is None or not values_equal(got, value):
                return Finding(flag, False, f"the server runs with speculative_algorithm={got}")
            accept = evidence.metrics_after.total("sglang:spec_accept_length")
            if not accept or accept <= 1.0:
                return Finding(flag, False, f"speculation configured but the accept length is {accept} "
                                            "(sglang:spec_accept_length): no draft token was accepted")
            return Finding(flag, True, f"accept length {accept:.2f} tokens per verify step")
        return super().findings(flag, value, evidence, default)
