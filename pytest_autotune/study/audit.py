"""The plumbing audit of model-call logs (``autotune audit CALLS.jsonl``, docs/guide/studies.md).

Infrastructure defects look like results: the reference study lost 97% of 148 calls to a 4096-token cap before
anyone noticed, and its "agent" arm was mostly measuring truncated answers. This module reads a JSON-lines log of
OpenAI chat-completion calls and counts what went wrong, per arm:

* truncation: ``finish_reason == "length"``;
* one shared completion-token ceiling: many calls stopping at exactly the same ``usage.completion_tokens`` (the
  request's ``max_tokens``/``max_completion_tokens`` when the log has it; otherwise the most common count among
  truncated calls) -- a cap, even where a client dropped ``finish_reason``;
* errors (an ``error`` object, an HTTP status >= 400, or a response without choices) and timeouts (an error that
  says so, HTTP 408/504, or a latency above ``[studies].call_timeout_s``);
* unreadable lines.

Each line is a response object as the API returns it, or a record ``{"request": {...}, "response": {...},
"error": ..., "status": 200, "latency_s": 1.2, "arm": "agent"}`` (``latency_ms``, ``duration_s``,
``elapsed_s`` and ``metadata.arm`` are read too). A rate above the protocol's threshold flags the log; a study
whose arms carry a flagged log is "plumbing suspect".
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from ..protocol import StudiesSection


@dataclass(frozen=True)
class CallRecord:
    line: int
    arm: Optional[str]
    finish_reason: Optional[str]
    completion_tokens: Optional[int]
    max_tokens: Optional[int]
    error: Optional[str]
    timeout: bool
    latency_s: Optional[float]
    content_sha256: Optional[str]  # digest of the answer text (identical-arms check)
    raw: str


def _num(x: Any) -> Optional[float]:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def _int(x: Any) -> Optional[int]:
    return int(x) if isinstance(x, int) and not isinstance(x, bool) else None


def parse_call(obj: Any, line: int, raw: str, timeout_s: float) -> Optional[CallRecord]:
    """One call from one JSON value; None when the line is not a call record (unreadable)."""
    if not isinstance(obj, dict):
        return None
    request: dict = _as_dict(obj.get("request"))
    response = obj.get("response") if isinstance(obj.get("response"), dict) else None
    if response is None and ("choices" in obj or obj.get("object") == "chat.completion"):
        response = obj
    meta = _as_dict(obj.get("metadata"))
    rmeta = _as_dict(request.get("metadata"))
    arm = obj.get("arm") or meta.get("arm") or rmeta.get("arm")
    err = obj.get("error")
    if err is None and response is not None:
        err = response.get("error")
    status = _int(obj.get("status", obj.get("status_code")))
    latency = _num(obj.get("latency_s"))
    for key, scale in (("duration_s", 1.0), ("elapsed_s", 1.0), ("latency_ms", 1e-3)):
        if latency is None and _num(obj.get(key)) is not None:
            latency = _num(obj.get(key)) * scale  # type: ignore[operator]
    error: Optional[str] = None
    if err:
        if isinstance(err, dict):
            error = str(err.get("message") or err.get("type") or err.get("code") or json.dumps(err))
            etype = f"{err.get('type', '')} {err.get('code', '')}"
        else:
            error, etype = str(err), ""
        error = error[:200] or "error"
        err_text = f"{error} {etype}".lower()
    else:
        err_text = ""
    if error is None and status is not None and status >= 400:
        error = f"HTTP {status}"
    finish, completion, content_digest = None, None, None
    if response is not None:
        choices = response.get("choices")
        if isinstance(choices, list) and choices and isinstance(choices[0], dict):
            finish = choices[0].get("finish_reason")
            msg = choices[0].get("message") if isinstance(choices[0].get("message"), dict) else {}
            content = msg.get("content") if msg else choices[0].get("text")
            calls = msg.get("tool_calls") if msg else None
            content_digest = hashlib.sha256(json.dumps([content, calls], sort_keys=True, default=str)
                                            .encode()).hexdigest()
        elif error is None:
            error = "response without choices"
        usage = response.get("usage") if isinstance(response.get("usage"), dict) else {}
        completion = _int(usage.get("completion_tokens"))
    elif error is None:
        return None
    max_tokens = _int(request.get("max_completion_tokens", request.get("max_tokens")))
    timeout = ("timeout" in err_text or "timed out" in err_text or status in (408, 504)
               or (latency is not None and latency > timeout_s))
    return CallRecord(line, str(arm) if arm is not None else None, finish if isinstance(finish, str) else None,
                      completion, max_tokens, error, timeout, latency, content_digest, raw)


@dataclass
class AuditStats:
    """Counts over a set of calls (one arm, or the whole log)."""

    calls: int = 0
    truncated: int = 0
    ceiling_tokens: Optional[int] = None
    ceiling_calls: int = 0
    errors: int = 0
    timeouts: int = 0
    flags: list[str] = field(default_factory=list)

    def rate(self, n: int) -> float:
        return n / self.calls if self.calls else 0.0

    def to_json(self) -> dict:
        return {"calls": self.calls, "truncated": self.truncated, "truncation_rate": self.rate(self.truncated),
                "ceiling_tokens": self.ceiling_tokens, "ceiling_calls": self.ceiling_calls,
                "ceiling_rate": self.rate(self.ceiling_calls), "errors": self.errors,
                "error_rate": self.rate(self.errors), "timeouts": self.timeouts,
                "timeout_rate": self.rate(self.timeouts), "flags": list(self.flags)}


def _stats(calls: list[CallRecord], th: StudiesSection) -> AuditStats:
    s = AuditStats(calls=len(calls))
    s.truncated = sum(1 for c in calls if c.finish_reason == "length")
    s.errors = sum(1 for c in calls if c.error is not None and not c.timeout)
    s.timeouts = sum(1 for c in calls if c.timeout)
    caps = Counter(c.max_tokens for c in calls if c.max_tokens is not None)
    if caps:
        s.ceiling_tokens = caps.most_common(1)[0][0]
    else:
        stopped = Counter(c.completion_tokens for c in calls
                          if c.finish_reason == "length" and c.completion_tokens is not None)
        if stopped:
            s.ceiling_tokens = stopped.most_common(1)[0][0]
    if s.ceiling_tokens is not None:
        s.ceiling_calls = sum(1 for c in calls if c.completion_tokens == s.ceiling_tokens)
    if s.calls:
        if s.rate(s.truncated) > th.max_truncation_rate:
            s.flags.append(f"truncation: {s.truncated} of {s.calls} calls ({s.rate(s.truncated):.1%}) ended with "
                           f"finish_reason \"length\" (threshold {th.max_truncation_rate:.0%})")
        if s.ceiling_tokens is not None and s.rate(s.ceiling_calls) > th.max_truncation_rate:
            s.flags.append(f"ceiling: {s.ceiling_calls} of {s.calls} calls ({s.rate(s.ceiling_calls):.1%}) "
                           f"stopped at exactly {s.ceiling_tokens} completion tokens (a max-token cap; threshold "
                           f"{th.max_truncation_rate:.0%})")
        if s.rate(s.errors) > th.max_error_rate:
            s.flags.append(f"errors: {s.errors} of {s.calls} calls ({s.rate(s.errors):.1%}) failed "
                           f"(threshold {th.max_error_rate:.0%})")
        if s.rate(s.timeouts) > th.max_timeout_rate:
            s.flags.append(f"timeouts: {s.timeouts} of {s.calls} calls ({s.rate(s.timeouts):.1%}) timed out "
                           f"(threshold {th.max_timeout_rate:.0%}, or slower than {th.call_timeout_s:g} s)")
    return s


@dataclass
class AuditReport:
    path: str
    calls: list[CallRecord]
    unreadable: list[int]  # line numbers
    overall: AuditStats
    by_arm: dict[str, AuditStats]
    thresholds: StudiesSection

    @property
    def flagged(self) -> bool:
        return bool(self.overall.flags) or bool(self.unreadable) or any(s.flags for s in self.by_arm.values())

    def flags(self) -> list[str]:
        out = list(self.overall.flags)
        for arm, s in self.by_arm.items():
            out += [f"arm {arm}: {f}" for f in s.flags]
        if self.unreadable:
            shown = ", ".join(str(n) for n in self.unreadable[:10])
            out.append(f"unreadable: {len(self.unreadable)} line(s) are not call records (line {shown}); a log "
                       "that drops calls hides them from the audit")
        return out

    def content_digest(self) -> str:
        """Digest of the sequence of answers: two arms with the same digest got byte-identical trajectories."""
        h = hashlib.sha256()
        for c in self.calls:
            h.update((c.content_sha256 or "-").encode())
        return h.hexdigest()

    def to_json(self) -> dict:
        return {"path": self.path, "flagged": self.flagged, "flags": self.flags(),
                "unreadable_lines": self.unreadable, "overall": self.overall.to_json(),
                "by_arm": {a: s.to_json() for a, s in self.by_arm.items()},
                "content_sha256": self.content_digest()}

    def render(self) -> str:
        s = self.overall
        arms = ", ".join(f"{a} {st.calls}" for a, st in self.by_arm.items())
        lines = [f"{self.path}: {s.calls} call(s)" + (f" (arms: {arms})" if arms else "")
                 + (f", {len(self.unreadable)} unreadable line(s)" if self.unreadable else "")]

        def row(name: str, n: int, threshold: float, extra: str = "") -> str:
            rate = s.rate(n)
            mark = "FLAG" if s.calls and rate > threshold else "ok"
            return f"  {name:<34} {n:>6} ({rate:6.1%})  threshold {threshold:.0%}  {mark}{extra}"

        th = self.thresholds
        lines.append(row("truncated (finish_reason length)", s.truncated, th.max_truncation_rate))
        if s.ceiling_tokens is not None:
            lines.append(row(f"at one ceiling ({s.ceiling_tokens} tokens)", s.ceiling_calls, th.max_truncation_rate))
        lines.append(row("errors", s.errors, th.max_error_rate))
        lines.append(row("timeouts", s.timeouts, th.max_timeout_rate))
        for f in self.flags():
            lines.append(f"flag: {f}")
        lines.append("PLUMBING SUSPECT: these calls did not test what the study claims; fix the client (token cap, "
                     "timeouts, errors) and rerun" if self.flagged else "OK: no plumbing problem above the "
                     "protocol's thresholds")
        return "\n".join(lines)


def audit_lines(lines: list[str], path: str, thresholds: StudiesSection) -> AuditReport:
    calls: list[CallRecord] = []
    unreadable: list[int] = []
    for i, raw in enumerate(lines, start=1):
        text = raw.strip()
        if not text:
            continue
        try:
            obj = json.loads(text)
        except ValueError:
            unreadable.append(i)
            continue
        rec = parse_call(obj, i, text, thresholds.call_timeout_s)
        if rec is None:
            unreadable.append(i)
        else:
            calls.append(rec)
    by_arm: dict[str, AuditStats] = {}
    arms = sorted({c.arm for c in calls if c.arm is not None})
    for arm in arms:
        by_arm[arm] = _stats([c for c in calls if c.arm == arm], thresholds)
    return AuditReport(path, calls, unreadable, _stats(calls, thresholds), by_arm, thresholds)


def audit_file(path: Path, thresholds: StudiesSection) -> AuditReport:
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError as e:
        from ..errors import AutotuneUsageError

        raise AutotuneUsageError(f"cannot read the call log {path}: {e.strerror}; pass the path of a JSON-lines "
                                 "file of model calls") from None
    return audit_lines(text.splitlines(), str(path), thresholds)


def _as_dict(value: Any) -> dict:
    return value if isinstance(value, dict) else {}
