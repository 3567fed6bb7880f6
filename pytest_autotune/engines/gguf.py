"""GGUF conversion of the tiny model for llama.cpp, with the converter that ships in the llama.cpp sources.

``convert_hf_to_gguf.py`` identifies a BPE tokenizer's pre-tokenizer by hashing how the tokenizer splits a fixed
test string; a tokenizer trained here is, by construction, in none of its tables, and the converter refuses it
("BPE pre-tokenizer was not recognized"). Our tokenizer's pre-tokenizer *is* GPT-2's byte-level regex
(:mod:`pytest_autotune.engines.model`), which llama.cpp implements as ``gpt-2``; the wrapper below runs the
unmodified converter with only that lookup answered (``get_vocab_base_pre`` falls back to ``"gpt-2"`` where it
would raise). Everything else — tensor names, the Q/K permutation for RoPE, vocabulary and merges, special
tokens, chat template — is the converter's own work. Output type f32, like the checkpoint.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

from .model import MadeModel, file_sha256, load_model

if TYPE_CHECKING:  # pragma: no cover
    from .install import Installation

GGUF_NAME = "model.gguf"
GGUF_MANIFEST = "autotune-gguf.json"

_WRAPPER = r"""
import runpy, sys
llama = sys.argv[1]
sys.path.insert(0, llama)
sys.path.insert(1, llama + "/gguf-py")
import conversion.base as base
_orig = base.TextModel.get_vocab_base_pre
def _pre(self, tokenizer):
    try:
        return _orig(self, tokenizer)
    except NotImplementedError:
        # a locally trained byte-level BPE with GPT-2's pre-tokenizer regex (pytest_autotune.engines.model)
        return "gpt-2"
base.TextModel.get_vocab_base_pre = _pre
sys.argv = [llama + "/convert_hf_to_gguf.py"] + sys.argv[2:]
runpy.run_path(llama + "/convert_hf_to_gguf.py", run_name="__main__")
"""


class GgufError(RuntimeError):
    pass


def ensure_gguf(model: MadeModel, inst: "Installation", *, log: Path | None = None) -> MadeModel:
    """``model`` with ``model.gguf`` (converted once; reused while its manifest matches the model's digest and
    the converter's llama.cpp version)."""
    out = model.path / GGUF_NAME
    manifest = model.path / GGUF_MANIFEST
    if out.is_file() and manifest.is_file():
        try:
            m = json.loads(manifest.read_text())
            if (m.get("model_digest") == model.digest and m.get("llamacpp") == inst.version
                    and m.get("sha256") == file_sha256(out)):
                reloaded = load_model(model.path)
                if reloaded is not None:
                    return reloaded
        except ValueError:
            pass
    py = inst.path("converter_python")
    llama = inst.path("llama_cpp")
    tmp = out.with_suffix(".gguf.tmp")
    cmd = [str(py), "-c", _WRAPPER, str(llama), str(model.path), "--outfile", str(tmp), "--outtype", "f32"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env={"PATH": "/usr/bin:/bin",
                                                                                  "HF_HUB_OFFLINE": "1",
                                                                                  "TRANSFORMERS_OFFLINE": "1"})
    if log is not None:
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0 or not tmp.is_file():
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-20:])
        raise GgufError(f"converting {model.path} to GGUF failed (exit {proc.returncode}):\n{tail}")
    tmp.replace(out)
    manifest.write_text(json.dumps({"model_digest": model.digest, "llamacpp": inst.version,
                                    "sha256": file_sha256(out), "outtype": "f32"}, indent=2, sort_keys=True) + "\n")
    reloaded = load_model(model.path)
    assert reloaded is not None
    return reloaded


def gguf_digest(model: MadeModel) -> str | None:
    m = model.path / GGUF_MANIFEST
    try:
        return json.loads(m.read_text()).get("sha256")
    except (OSError, ValueError):
        return None
