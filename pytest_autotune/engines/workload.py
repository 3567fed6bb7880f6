"""Workload profiles and the seeded prompt sets they generate.

A workload is what one *window* of load looks like: how many requests, how many in flight, how long the prompts
and the answers are. Three profiles (defaults below, every field can be set in a declaration file):

* ``short`` — short unique prompts, short answers: scheduling and batching dominate;
* ``shared-prefix`` — every request of a window starts with the same long prefix (a system prompt, a document)
  and ends with a short unique question: what prefix caching is for;
* ``long-output`` — short prompts, long answers: decode speed dominates (where speculation can help).

Prompts are generated text (:mod:`pytest_autotune.engines.text`) cut to a token count with the model's own
tokenizer. *The paired seeds decide them*: window ``k`` of every launch of an item, default or configuration,
sends exactly the prompts of seed ``k``, so the two arms of a pair get the same requests in the same order, and
nobody can know them before the run (the seeds come from the run's nonce). Answers have a fixed length
(``ignore_eos``): a configuration cannot look faster by answering less.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping, Optional

from .loadgen import Request
from .text import lexicon, paragraph

PROFILES: dict[str, dict[str, Any]] = {
    "short": {"requests": 64, "concurrency": 16, "prompt_tokens": [16, 64], "max_tokens": 32,
              "shared_prefix_tokens": 0},
    "shared-prefix": {"requests": 64, "concurrency": 16, "prompt_tokens": [16, 32], "max_tokens": 32,
                      "shared_prefix_tokens": 384},
    "long-output": {"requests": 32, "concurrency": 16, "prompt_tokens": [16, 32], "max_tokens": 256,
                    "shared_prefix_tokens": 0},
}
APIS = ("completions", "chat")


class WorkloadError(ValueError):
    pass


@dataclass(frozen=True)
class Workload:
    name: str
    profile: str
    requests: int
    concurrency: int
    prompt_tokens: tuple[int, int]
    max_tokens: int
    shared_prefix_tokens: int = 0
    api: str = "completions"
    description: str = ""

    @classmethod
    def from_table(cls, name: str, table: Mapping[str, Any], where: str = "") -> "Workload":
        t = dict(table)
        profile = t.pop("profile", name)
        if profile not in PROFILES:
            raise WorkloadError(f"{where}[workloads.{name}]: profile {profile!r} is not one of "
                                f"{', '.join(PROFILES)}; set profile = \"short\" (or another)")
        merged = {**PROFILES[profile], **t}
        known = {"requests", "concurrency", "prompt_tokens", "max_tokens", "shared_prefix_tokens", "api",
                 "description"}
        unknown = sorted(set(merged) - known)
        if unknown:
            raise WorkloadError(f"{where}[workloads.{name}]: unknown key {unknown[0]!r}; known: {', '.join(sorted(known))}")
        pt = merged["prompt_tokens"]
        if isinstance(pt, int):
            pt = [pt, pt]
        w = cls(name=name, profile=profile, requests=int(merged["requests"]), concurrency=int(merged["concurrency"]),
                prompt_tokens=(int(pt[0]), int(pt[1])), max_tokens=int(merged["max_tokens"]),
                shared_prefix_tokens=int(merged["shared_prefix_tokens"]), api=str(merged.get("api", "completions")),
                description=str(merged.get("description", "")))
        problems = []
        if w.requests < 1 or w.concurrency < 1 or w.max_tokens < 1:
            problems.append("requests, concurrency and max_tokens must be >= 1")
        if not 1 <= w.prompt_tokens[0] <= w.prompt_tokens[1]:
            problems.append("prompt_tokens must be [min, max] with 1 <= min <= max")
        if w.shared_prefix_tokens < 0:
            problems.append("shared_prefix_tokens must be >= 0")
        if w.api not in APIS:
            problems.append(f"api must be one of {', '.join(APIS)}")
        if problems:
            raise WorkloadError(f"{where}[workloads.{name}]: " + "; ".join(problems))
        return w

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["prompt_tokens"] = list(self.prompt_tokens)
        return d

    def digest(self) -> str:
        """sha256 of the workload's definition and the text generator's version: with the seeds and the model it
        decides every byte sent."""
        blob = json.dumps({"workload": self.to_json(), "generator": GENERATOR_VERSION}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()

    def max_sequence_tokens(self) -> int:
        return self.shared_prefix_tokens + self.prompt_tokens[1] + self.max_tokens + 16


#: bumped whenever prompt generation changes (it is part of every workload digest)
GENERATOR_VERSION = "prompts/1"


@dataclass
class PromptBuilder:
    """Cuts generated text to exact token counts with the model's tokenizer (``tokenizer.json``)."""

    tokenizer_path: Path
    _tok: Any = field(default=None, repr=False)

    @property
    def tok(self) -> Any:
        if self._tok is None:
            self._tok = _load_tokenizer(str(self.tokenizer_path))
        return self._tok

    def text_of(self, rng: random.Random, n_tokens: int) -> str:
        words = max(4, n_tokens)
        while True:
            text = paragraph(rng, words, lexicon())
            ids = self.tok.encode(text, add_special_tokens=False).ids
            if len(ids) >= n_tokens:
                return self.tok.decode(ids[:n_tokens]).strip()
            words *= 2

    def count(self, text: str) -> int:
        return len(self.tok.encode(text, add_special_tokens=False).ids)

    def ids(self, text: str) -> list[int]:
        return list(self.tok.encode(text, add_special_tokens=False).ids)


@lru_cache(maxsize=8)
def _load_tokenizer(path: str) -> Any:
    from tokenizers import Tokenizer

    return Tokenizer.from_file(path)


def build_requests(workload: Workload, seed: int, builder: PromptBuilder, *, count: Optional[int] = None,
                   max_tokens: Optional[int] = None) -> list[Request]:
    """The requests of one window, decided by ``seed`` alone (and the workload and tokenizer)."""
    rng = random.Random(seed)
    n = workload.requests if count is None else count
    out_tokens = workload.max_tokens if max_tokens is None else max_tokens
    prefix = builder.text_of(rng, workload.shared_prefix_tokens) + "\n\n" if workload.shared_prefix_tokens else ""
    reqs = []
    lo, hi = workload.prompt_tokens
    for _ in range(n):
        body = builder.text_of(rng, rng.randint(lo, hi))
        text = prefix + body
        if workload.api == "chat":
            reqs.append(Request(max_tokens=out_tokens, messages=(("user", text),)))
        else:
            reqs.append(Request(max_tokens=out_tokens, prompt=text))
    return reqs
