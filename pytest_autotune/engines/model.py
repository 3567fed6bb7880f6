"""``autotune engine make-model``: a tiny random-weight Llama, made offline and deterministically from a seed.

No model can be downloaded where the engines are measured, and the measurement must not depend on one that can
change. The model is a Hugging Face Llama checkpoint (``config.json``, ``model.safetensors``,
``generation_config.json``) with a byte-level BPE tokenizer trained here on generated text
(:mod:`pytest_autotune.engines.text`) and a chat template, so every engine that serves Llama checkpoints (vLLM,
SGLang) loads it as it is, and llama.cpp loads its GGUF conversion (:mod:`pytest_autotune.engines.gguf`).

Weights come from ``torch.Generator().manual_seed(seed)`` (the CPU generator's stream is stable across torch
versions); the tokenizer from a corpus drawn from the same seed. ``autotune-model.json`` in the folder records the
spec and the sha256 of every file; the model's *digest* (sha256 over the files' names and digests) goes into
every engine result's provenance. Weights are random, so outputs are gibberish, but greedy outputs are fully
determined by the weights: that is what the quality gate compares (docs/guide/engines.md).

``lm_head_std`` is larger than the other weights' std on purpose: with every weight at 0.02 the logits of a
random model are nearly tied, and greedy decoding then flips on rounding differences that any change of batch
shape causes (fp32 reductions in another order), which would refuse honest configurations. Larger output
weights separate the top logits by far more than fp32 rounding but still less than a lossy KV-cache dtype
perturbs them (measured in docs/guide/engines.md).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from .text import corpus

MANIFEST = "autotune-model.json"
MANIFEST_SCHEMA = "pytest-autotune/engine-model/1"

BOS, EOS, START, END, PAD = "<|begin_of_text|>", "<|end_of_text|>", "<|start|>", "<|end|>", "<|pad|>"
SPECIAL_TOKENS = (BOS, EOS, START, END, PAD)

CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|start|>' + message['role'] + '\n' + message['content'] + '<|end|>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start|>assistant\n' }}{% endif %}"
)


@dataclass(frozen=True)
class ModelSpec:
    """Everything that decides the model's bytes. ``autotune engine make-model --layers 4 ...`` sets these."""

    seed: int = 0
    layers: int = 2
    hidden: int = 256
    heads: int = 4
    kv_heads: int = 2
    intermediate: int = 688
    vocab_size: int = 2048
    max_position: int = 2048
    init_std: float = 0.02
    lm_head_std: float = 0.5
    corpus_chars: int = 2_000_000
    rope_theta: float = 10000.0

    def __post_init__(self) -> None:
        problems = []
        if self.hidden % self.heads:
            problems.append(f"hidden ({self.hidden}) must be a multiple of heads ({self.heads})")
        if self.heads % self.kv_heads:
            problems.append(f"heads ({self.heads}) must be a multiple of kv_heads ({self.kv_heads})")
        if self.vocab_size < 256 + len(SPECIAL_TOKENS):
            problems.append(f"vocab_size ({self.vocab_size}) must hold the 256 bytes and the special tokens")
        if self.layers < 1 or self.intermediate < 1 or self.max_position < 64:
            problems.append("layers and intermediate must be >= 1, max_position >= 64")
        if self.seed < 0:
            problems.append("seed must be >= 0")
        if problems:
            raise ValueError("invalid model spec: " + "; ".join(problems))

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    def key(self) -> str:
        """Short digest of the spec: names the model's folder."""
        blob = json.dumps(dataclasses.asdict(self), sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:12]

    @property
    def name(self) -> str:
        return f"tiny-llama-s{self.seed}-{self.key()}"

    def n_params(self) -> int:
        h, i, v, kv = self.hidden, self.intermediate, self.vocab_size, self.kv_heads * self.head_dim
        per_layer = h * h * 2 + h * kv * 2 + 3 * h * i + 2 * h
        return 2 * v * h + self.layers * per_layer + h


@dataclass(frozen=True)
class MadeModel:
    path: Path
    spec: ModelSpec
    digest: str  # sha256 over (file name, file sha256) of every file except the manifest
    files: dict[str, str]
    gguf: Optional[Path] = None

    def manifest(self) -> dict[str, Any]:
        return {"schema": MANIFEST_SCHEMA, "spec": dataclasses.asdict(self.spec), "digest": self.digest,
                "files": self.files, "n_params": self.spec.n_params()}


def file_sha256(p: Path) -> str:
    h = hashlib.sha256()
    with open(p, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def folder_digest(files: dict[str, str]) -> str:
    h = hashlib.sha256()
    for name in sorted(files):
        h.update(name.encode() + b"\0" + files[name].encode() + b"\n")
    return h.hexdigest()


def _train_tokenizer(spec: ModelSpec):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    # the GPT-2 byte-level pre-tokenizer (its regex), which llama.cpp implements as pre-tokenizer "gpt-2"
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=spec.vocab_size, special_tokens=list(SPECIAL_TOKENS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
                                  min_frequency=2)
    tok.train_from_iterator(corpus(spec.seed, spec.corpus_chars), trainer=trainer)
    bos = tok.token_to_id(BOS)
    tok.post_processor = processors.TemplateProcessing(single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B",
                                                       special_tokens=[(BOS, bos)])
    return tok


def _weights(spec: ModelSpec, vocab: int) -> dict:
    import torch

    g = torch.Generator().manual_seed(spec.seed)

    def normal(*shape: int, std: float) -> "torch.Tensor":
        return (torch.randn(*shape, generator=g, dtype=torch.float32) * std).contiguous()

    h, i, kv = spec.hidden, spec.intermediate, spec.kv_heads * spec.head_dim
    w: dict[str, torch.Tensor] = {"model.embed_tokens.weight": normal(vocab, h, std=spec.init_std)}
    for layer in range(spec.layers):
        p = f"model.layers.{layer}."
        w[p + "self_attn.q_proj.weight"] = normal(h, h, std=spec.init_std)
        w[p + "self_attn.k_proj.weight"] = normal(kv, h, std=spec.init_std)
        w[p + "self_attn.v_proj.weight"] = normal(kv, h, std=spec.init_std)
        w[p + "self_attn.o_proj.weight"] = normal(h, h, std=spec.init_std)
        w[p + "mlp.gate_proj.weight"] = normal(i, h, std=spec.init_std)
        w[p + "mlp.up_proj.weight"] = normal(i, h, std=spec.init_std)
        w[p + "mlp.down_proj.weight"] = normal(h, i, std=spec.init_std)
        w[p + "input_layernorm.weight"] = torch.ones(h)
        w[p + "post_attention_layernorm.weight"] = torch.ones(h)
    w["model.norm.weight"] = torch.ones(h)
    w["lm_head.weight"] = normal(vocab, h, std=spec.lm_head_std)
    return w


def _config(spec: ModelSpec, vocab: int, bos: int, eos: int) -> dict[str, Any]:
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": spec.hidden,
        "intermediate_size": spec.intermediate,
        "num_hidden_layers": spec.layers,
        "num_attention_heads": spec.heads,
        "num_key_value_heads": spec.kv_heads,
        "head_dim": spec.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": spec.max_position,
        "rms_norm_eps": 1e-5,
        "rope_theta": spec.rope_theta,
        "rope_scaling": None,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "mlp_bias": False,
        "initializer_range": spec.init_std,
        "pretraining_tp": 1,
        "tie_word_embeddings": False,
        "vocab_size": vocab,
        "bos_token_id": bos,
        "eos_token_id": eos,
        "torch_dtype": "float32",
        "use_cache": True,
    }


def make_model(spec: ModelSpec, out_dir: Path, *, force: bool = False) -> MadeModel:
    """Write the model into ``out_dir/<spec.name>`` (atomically: a temporary folder renamed at the end) and
    return it. An existing, intact folder for the same spec is returned as it is unless ``force``."""
    out_dir = Path(out_dir)
    target = out_dir / spec.name
    if not force:
        existing = load_model(target)
        if existing is not None:
            return existing
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{spec.name}-", dir=out_dir))
    try:
        from safetensors.torch import save_file

        tok = _train_tokenizer(spec)
        vocab = tok.get_vocab_size()
        bos, eos = tok.token_to_id(BOS), tok.token_to_id(EOS)
        pad = tok.token_to_id(PAD)
        tok.save(str(tmp / "tokenizer.json"))
        (tmp / "tokenizer_config.json").write_text(json.dumps({
            "tokenizer_class": "PreTrainedTokenizerFast",
            "bos_token": BOS, "eos_token": EOS, "pad_token": PAD, "unk_token": None,
            "add_bos_token": True, "add_eos_token": False, "clean_up_tokenization_spaces": False,
            "model_max_length": spec.max_position, "chat_template": CHAT_TEMPLATE,
            "added_tokens_decoder": {str(tok.token_to_id(t)): {"content": t, "special": True, "normalized": False,
                                                               "lstrip": False, "rstrip": False,
                                                               "single_word": False}
                                     for t in SPECIAL_TOKENS},
        }, indent=2, sort_keys=True) + "\n")
        (tmp / "special_tokens_map.json").write_text(json.dumps(
            {"bos_token": BOS, "eos_token": EOS, "pad_token": PAD}, indent=2, sort_keys=True) + "\n")
        (tmp / "config.json").write_text(json.dumps(_config(spec, vocab, bos, eos), indent=2, sort_keys=True) + "\n")
        (tmp / "generation_config.json").write_text(json.dumps(
            {"bos_token_id": bos, "eos_token_id": eos, "pad_token_id": pad, "do_sample": False},
            indent=2, sort_keys=True) + "\n")
        save_file(_weights(spec, vocab), str(tmp / "model.safetensors"), metadata={"format": "pt"})
        files = {p.name: file_sha256(p) for p in sorted(tmp.iterdir()) if p.is_file()}
        made = MadeModel(tmp, spec, folder_digest(files), files)
        (tmp / MANIFEST).write_text(json.dumps(made.manifest(), indent=2, sort_keys=True) + "\n")
        if target.exists():
            shutil.rmtree(target)
        os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    loaded = load_model(target)
    assert loaded is not None
    return loaded


def load_model(path: Path, *, check: bool = True) -> Optional[MadeModel]:
    """The model in ``path`` if its manifest is there and every file still has its recorded digest (None when
    the folder is missing, incomplete or was changed: make it again)."""
    path = Path(path)
    mf = path / MANIFEST
    if not mf.is_file():
        return None
    try:
        m = json.loads(mf.read_text())
        spec = ModelSpec(**m["spec"])
        files = dict(m["files"])
    except (ValueError, KeyError, TypeError):
        return None
    if check:
        for name, digest in files.items():
            p = path / name
            if not p.is_file() or file_sha256(p) != digest:
                return None
    if folder_digest(files) != m.get("digest"):
        return None
    gguf = path / "model.gguf"
    return MadeModel(path, spec, m["digest"], files, gguf if gguf.is_file() else None)
