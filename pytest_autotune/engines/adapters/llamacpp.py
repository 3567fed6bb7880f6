"""llama.cpp's ``llama-server``, built from the C++ sources inside the ``llama-cpp-python`` sdist.

Install recipe (``autotune engine install llamacpp``, ~9 min on 2 cores): ``pip download`` the pinned sdist
(no binary), unpack it, configure ``vendor/llama.cpp`` with CMake (server only: no tests, examples, web UI,
OpenSSL or downloads) and build the ``llama-server`` target; then a small venv with the GGUF converter's
requirements (torch CPU, transformers, sentencepiece, the sdist's own ``gguf-py``) for
:mod:`pytest_autotune.engines.gguf`.

Effective configuration: ``/props`` (``total_slots``, ``default_generation_settings.n_ctx``, build info) and
``/slots`` (each slot's context and speculative settings) plus the startup log. Delivery evidence: ``/metrics``
(``--metrics``): ``llamacpp:requests_processing`` (how many requests ran at once),
``llamacpp:prompt_tokens_cached_total`` (prompt cache), ``llamacpp:spec_decode_num_drafts_total`` (speculation).
"""

from __future__ import annotations

import re
import tarfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Optional

import httpx

from .. import localhttp
from .base import EffectiveConfig, EngineAdapter, Finding, FlagSet, FlagValue, LaunchEvidence, values_equal

if TYPE_CHECKING:  # pragma: no cover
    from ..install import Installation, Runner
    from ..metrics import MetricsSnapshot
    from ..model import MadeModel

SDIST = "llama-cpp-python"
SDIST_VERSION = "0.3.36"
CMAKE_OPTIONS = (
    "-DCMAKE_BUILD_TYPE=Release", "-DBUILD_SHARED_LIBS=OFF", "-DLLAMA_BUILD_SERVER=ON", "-DLLAMA_BUILD_TOOLS=ON",
    "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_APP=OFF", "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF", "-DLLAMA_OPENSSL=OFF", "-DGGML_NATIVE=ON",
)
#: the GGUF converter's requirements (vendor/llama.cpp/requirements/requirements-convert_hf_to_gguf.txt pins
#: torch 2.11 from the PyTorch CPU index; the CPU torch this project pins works and needs no extra index)
CONVERTER_REQUIREMENTS = ("torch==2.13.0", "numpy>=2.2.6", "sentencepiece>=0.1.98,<0.3.0", "transformers==4.57.6",
                          "protobuf>=4.21.0,<5.0.0", "safetensors")


class LlamaCppAdapter(EngineAdapter):
    name: ClassVar[str] = "llamacpp"
    title: ClassVar[str] = "llama.cpp server"
    model_format: ClassVar[str] = "gguf"
    health_path: ClassVar[str] = "/health"
    load_gauges: ClassVar[tuple[str, ...]] = ("llamacpp:requests_processing", "llamacpp:requests_deferred")
    base_env: ClassVar[dict[str, str]] = {"LLAMA_ARG_HOST": "127.0.0.1", "LLAMA_OFFLINE": "1"}

    # ------------------------------------------------------------------------------------------ install
    def recipe(self) -> str:
        return "\n".join([f"sdist {SDIST}=={SDIST_VERSION}", "target llama-server", *CMAKE_OPTIONS,
                          "converter " + " ".join(CONVERTER_REQUIREMENTS)])

    def build(self, root: Path, run: "Runner") -> dict[str, Path]:
        import os
        import sys

        src = root / "src"
        src.mkdir(parents=True, exist_ok=True)
        tarball = src / f"llama_cpp_python-{SDIST_VERSION}.tar.gz"
        if not tarball.is_file():
            run.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                     f"{SDIST}=={SDIST_VERSION}", "-d", src], what="download the sdist")
        tree = src / f"llama_cpp_python-{SDIST_VERSION}"
        if not (tree / "vendor" / "llama.cpp" / "CMakeLists.txt").is_file():
            run.note(f"unpack {tarball.name}")
            with tarfile.open(tarball) as tf:
                tf.extractall(src, filter="data")
        llama = tree / "vendor" / "llama.cpp"
        build = root / "build"
        jobs = str(max(1, os.cpu_count() or 1))
        run.run(["cmake", "-S", llama, "-B", build, *CMAKE_OPTIONS], what="configure (cmake)")
        run.run(["cmake", "--build", build, "--target", "llama-server", "-j", jobs], what="build llama-server")
        venv = root / "converter-venv"
        if not (venv / "bin" / "python").exists():
            run.run([sys.executable, "-m", "venv", venv], what="converter venv")
        py = venv / "bin" / "python"
        run.run([py, "-m", "pip", "install", "--quiet", *CONVERTER_REQUIREMENTS], what="converter requirements")
        run.run([py, "-m", "pip", "install", "--quiet", llama / "gguf-py"], what="gguf-py from the sdist")
        return {"server": build / "bin" / "llama-server", "converter_python": py, "llama_cpp": llama}

    def check_installation(self, inst: "Installation") -> str:
        import subprocess

        from ..install import EngineInstallError

        server = inst.path("server")
        try:
            out = subprocess.run([str(server), "--version"], capture_output=True, text=True, timeout=60)
        except OSError as e:
            raise EngineInstallError(f"{server} cannot run ({e}); reinstall: autotune engine install llamacpp "
                                     "--force") from e
        text = out.stdout + out.stderr
        # "version: 0.5.0-dev (build 1, commit 0c1e570)" (older releases: "version: 4567 (abcdef0)")
        m = re.search(r"version:\s*(.+)", text)
        if out.returncode != 0 or not m:
            raise EngineInstallError(f"{server} --version failed: {text[-300:]}; reinstall with --force")
        return f"{m.group(1).strip()} (llama-cpp-python {SDIST_VERSION} sdist)"

    # ------------------------------------------------------------------------------------------ launch
    def command(self, inst: "Installation", model: "MadeModel", served_name: str, port: int,
                flags: FlagSet) -> list[str]:
        if model.gguf is None:
            raise ValueError(f"{model.path} has no model.gguf: convert it first (autotune engine make-model --gguf)")
        # --log-verbosity 4: the context (n_ctx, n_batch, n_ubatch, flash_attn, kv_unified) and the KV cache types
        # are logged at that level only; they are the effective configuration that /props does not show
        return [str(inst.path("server")), "--model", str(model.gguf), "--alias", served_name, "--host", "127.0.0.1",
                "--port", str(port), "--metrics", "--slots", "--no-webui", "--log-verbosity", "4", *self.render(flags)]

    def render_flag(self, name: str, value: FlagValue) -> list[str]:
        # llama.cpp spells a disabled switch --no-NAME too, but its on/off options with a value
        # (e.g. --flash-attn on|off|auto) take the value; tables are not used by llama.cpp
        return super().render_flag(name, value)

    # ------------------------------------------------------------------------------------------ read back
    def effective_config(self, base_url: str, log_text: str, metrics: "MetricsSnapshot") -> EffectiveConfig:
        values: dict[str, Any] = {}
        sources = []
        with localhttp.client(timeout=10.0) as c:
            props = c.get(base_url + "/props").json()
            sources.append("/props")
            slots: list = []
            try:
                r = c.get(base_url + "/slots")
                if r.status_code == 200:
                    slots = r.json()
                    sources.append("/slots")
            except (httpx.HTTPError, ValueError):
                slots = []
        for k in ("total_slots", "model_path", "build_info", "is_sleeping"):
            if k in props:
                values[f"props.{k}"] = props[k]
        dgs = props.get("default_generation_settings") or {}
        for k, v in dgs.items():
            if not isinstance(v, (dict, list)):
                values[f"props.default.{k}"] = v
        for k, v in (dgs.get("params") or {}).items():
            if not isinstance(v, (dict, list)):
                values[f"props.params.{k}"] = v
        if slots and isinstance(slots, list):
            values["slots.count"] = len(slots)
            first = slots[0] if isinstance(slots[0], dict) else {}
            for k in ("n_ctx", "speculative"):
                if k in first:
                    values[f"slots.{k}"] = first[k]
            for k, v in (first.get("params") or {}).items():
                if k.startswith("speculative") and not isinstance(v, (dict, list)):
                    values[f"slots.params.{k}"] = v
        values.update(parse_startup_log(log_text))
        version = str(props.get("build_info", ""))
        return EffectiveConfig(values, version, tuple(sources + ["log"]))

    def findings(self, flag: str, value: FlagValue, evidence: LaunchEvidence,
                 default: LaunchEvidence) -> Finding:
        eff = evidence.effective
        if flag in ("parallel", "np"):
            slots = eff.get("props.total_slots")
            if not values_equal(slots, value):
                return Finding(flag, False, f"/props total_slots = {slots}, not {value}")
            if values_equal(default.effective.get("props.total_slots"), value):
                return Finding(flag, False, f"the default already runs {slots} slots: --{flag} {value} changes nothing")
            peak = evidence.gauge_maxima.get("llamacpp:requests_processing")
            if peak is not None and peak > float(value):
                return Finding(flag, False, f"{peak:g} requests processed at once, more than {value} slots")
            return Finding(flag, True, f"/props total_slots = {slots}; at most {peak} requests processing at once")
        if flag == "spec-type":
            drafts = evidence.delta("llamacpp:spec_decode_num_drafts")
            if value == "none":
                return Finding(flag, not drafts, f"{drafts or 0:g} drafts")
            if not drafts:
                return Finding(flag, False, f"speculation '{value}' configured but {drafts or 0:g} drafts in "
                                            f"{evidence.requests_sent} requests (llamacpp:spec_decode_num_drafts)")
            acc = evidence.delta("llamacpp:spec_decode_num_accepted_tokens")
            tok = evidence.delta("llamacpp:spec_decode_num_draft_tokens")
            rate = f", {acc / tok:.0%} of draft tokens accepted" if acc is not None and tok else ""
            return Finding(flag, True, f"{drafts:g} drafts{rate}")
        if flag == "cache-prompt":
            cached = evidence.delta("llamacpp:prompt_tokens_cached")
            if value is False and cached:
                return Finding(flag, False, f"prompt caching off, but {cached:g} prompt tokens served from cache")
            if value is True and not cached:
                return Finding(flag, False, "prompt caching on, but no prompt token was served from cache")
            return Finding(flag, True, f"{cached or 0:g} prompt tokens served from cache "
                                       "(llamacpp:prompt_tokens_cached)")
        if flag == "cache-reuse":
            cached = evidence.delta("llamacpp:prompt_tokens_cached")
            if int(value) > 0 and not cached:
                return Finding(flag, False, f"cache reuse {value} but no prompt tokens were served from cache")
            return Finding(flag, None, f"{cached or 0:g} prompt tokens served from cache")
        key = _READBACK.get(flag)
        if key is not None:
            got = eff.get(key)
            want = _SPELLING.get(str(value), value)
            if got is None:
                return Finding(flag, False, f"{key} is not in the startup log: the server did not report the flag")
            if not values_equal(got, want):
                return Finding(flag, False, f"{key} = {got!r}, not the requested {value!r}")
            if values_equal(default.effective.get(key), want):
                return Finding(flag, False, f"the default already runs with {key} = {got!r}: --{flag} {value} "
                                            "changes nothing")
            return Finding(flag, True, f"{key} = {got!r} (startup log)")
        return Finding(flag, None, "llama.cpp reports no parsed arguments: judged by its effective configuration "
                                   "(/props, /slots, startup log) differing from the default's")


#: flag -> the effective-configuration key that shows its value (startup log at --log-verbosity 4, /props)
_READBACK = {
    "cache-type-k": "log.type_k", "ctk": "log.type_k", "cache-type-v": "log.type_v", "ctv": "log.type_v",
    "batch-size": "log.ctx.n_batch", "b": "log.ctx.n_batch", "ubatch-size": "log.ctx.n_ubatch",
    "ub": "log.ctx.n_ubatch", "ctx-size": "log.ctx.n_ctx", "c": "log.ctx.n_ctx", "flash-attn": "log.ctx.flash_attn",
    "fa": "log.ctx.flash_attn", "kv-unified": "log.ctx.kv_unified", "threads": "log.n_threads",
    "t": "log.n_threads", "threads-batch": "log.n_threads_batch", "tb": "log.n_threads_batch",
}
#: how the log spells values the flag spells otherwise
_SPELLING = {"on": "enabled", "off": "disabled", "True": "true", "False": "false"}


def parse_startup_log(log_text: str) -> dict[str, Any]:
    """``log.*`` keys from llama-server's startup log (``--log-verbosity 4``): the llama_context values, the KV
    cache types, threads, parallel slots and the CPU features it was built for."""
    values: dict[str, Any] = {}
    m: Optional[re.Match[str]]
    for m in re.finditer(r"llama_context:\s+(\w+)\s+=\s+(\S+)", log_text):
        values[f"log.ctx.{m.group(1)}"] = m.group(2)
    m = re.search(r"K \((\w+)\):.*V \((\w+)\):", log_text)
    if m:
        values["log.type_k"], values["log.type_v"] = m.group(1), m.group(2)
    m = re.search(r"n_threads = (\d+) \(n_threads_batch = (\d+)\)", log_text)
    if m:
        values["log.n_threads"], values["log.n_threads_batch"] = m.group(1), m.group(2)
    m = re.search(r"n_slots = (\d+)", log_text)
    if m:
        values["log.n_slots"] = m.group(1)
    m = re.search(r"system_info: (.*)", log_text)
    if m:
        values["log.system_info"] = m.group(1).strip()
    return values
