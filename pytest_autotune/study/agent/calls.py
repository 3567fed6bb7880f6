"""The model-call log (docs/guide/llm-tuner.md#the-call-log): one JSON line per model call, and the redaction that keeps
the API key out of everything the search writes.

Each line is a record that ``autotune audit`` and ``autotune study report --calls`` read as they are::

    {"schema": "pytest-autotune/llm-call/1", "study": ..., "arm": ..., "problem": ..., "iteration": 3,
     "candidate": "llm_s0_i003", "endpoint": "http://127.0.0.1:8000/v1", "request_sha256": "<64 hex>",
     "request": {"model", "messages", "max_tokens", "temperature", "seed"}, "status": 200,
     "response": {... the response body as the endpoint sent it ...}, "finish_reason": "stop",
     "usage": {"prompt_tokens", "completion_tokens", "total_tokens"}, "latency_s": 1.234,
     "attempts": [{"status", "error", "latency_s"}, ...], "error": null, "started_at": "<UTC ISO time>"}

The API key is never part of a record: it travels in the client's Authorization header only. Should an endpoint
echo it back (in an error body, or in a reply), :class:`Redactor` replaces it before anything is written -- the
log, the reply files, the candidates, the manifest.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence
from urllib.parse import urlsplit, urlunsplit

CALL_SCHEMA = "pytest-autotune/llm-call/1"
REDACTED = "[REDACTED]"


@dataclass(frozen=True)
class Redactor:
    """Replaces the secrets (the API key) in text written anywhere."""

    secrets: tuple[str, ...] = ()

    @classmethod
    def of(cls, secrets: Sequence[Optional[str]]) -> "Redactor":
        return cls(tuple(s for s in secrets if s and len(s) >= 4))

    def text(self, s: str) -> str:
        for secret in self.secrets:
            if secret in s:
                s = s.replace(secret, REDACTED)
            escaped = json.dumps(secret)[1:-1]
            if escaped != secret and escaped in s:
                s = s.replace(escaped, REDACTED)
        return s

    def json_line(self, record: dict[str, Any]) -> str:
        return self.text(json.dumps(record, sort_keys=True, ensure_ascii=False, default=str))


def public_endpoint(url: str) -> str:
    """The endpoint as recorded: scheme, host, port and path; no user info, query or fragment (they can hold
    credentials)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


@dataclass
class TokenCount:
    prompt: int = 0
    completion: int = 0
    calls: int = 0

    @property
    def total(self) -> int:
        return self.prompt + self.completion

    def add(self, usage: Optional[dict]) -> None:
        self.calls += 1
        if not isinstance(usage, dict):
            return
        p, c = usage.get("prompt_tokens"), usage.get("completion_tokens")
        self.prompt += p if isinstance(p, int) else 0
        self.completion += c if isinstance(c, int) else 0

    def describe(self, budget: Optional[int]) -> str:
        of = f" of the token budget {budget}" if budget else " (no token budget)"
        return (f"{self.total} tokens spent{of}: {self.prompt} prompt + {self.completion} completion in "
                f"{self.calls} call(s)")


@dataclass
class CallLog:
    """Appends one record per call to a JSON-lines file (created with its folder; an existing log is continued)."""

    path: Path
    redactor: Redactor = field(default_factory=Redactor)

    def append(self, record: dict[str, Any]) -> int:
        """Write ``record`` (redacted, flushed); its line number (1-based)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        line = self.redactor.json_line({"schema": CALL_SCHEMA, **record})
        n = self.lines()
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(line + "\n")
            f.flush()
        return n + 1

    def lines(self) -> int:
        try:
            with open(self.path, encoding="utf-8", errors="replace") as f:
                return sum(1 for _ in f)
        except OSError:
            return 0

    def spent(self, study: str) -> TokenCount:
        """Tokens of the study's calls already in the log (a study's token budget spans its searches)."""
        count = TokenCount()
        try:
            text = self.path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return count
        for raw in text.splitlines():
            try:
                rec = json.loads(raw)
            except ValueError:
                continue
            if isinstance(rec, dict) and rec.get("study") == study:
                count.add(rec.get("usage"))
        return count
