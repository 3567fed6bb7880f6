"""One chat completion against an OpenAI-compatible endpoint, through the official ``openai`` client, with
retries, a per-call timeout and a log line per call (docs/guide/llm-tuner.md#calls-that-behave).

* The client is ``openai.OpenAI`` with its own retries off (``max_retries=0``): the retries are made here, so each
  attempt's status, error and latency go into the call's log line. A transport error (connection refused or
  reset, the per-call timeout) and HTTP 408, 429 and 5xx are retried, after ``backoff_s * 2**k`` seconds (at most
  60 s, or the server's ``Retry-After`` when it asks for less than that); any other status is the call's answer.
* The API key comes from the environment only (``OPENAI_API_KEY``, or the variable ``--api-key-env`` names) and is
  handed to the client, which sends it in the Authorization header. It is in no record: see
  :mod:`pytest_autotune.study.agent.calls`.
* The response body is logged as the endpoint sent it (``with_raw_response``), and read from there -- not through
  the client's models -- so a field the client does not know is still in the log.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable, Optional

from ...errors import AutotuneUsageError
from ...result import canonical_json
from .calls import CallLog, public_endpoint

DEFAULT_KEY_ENV = "OPENAI_API_KEY"
#: sent when no key is set (local servers such as vLLM accept any)
NO_KEY = "EMPTY"
MAX_BACKOFF_S = 60.0


@dataclass(frozen=True)
class ClientSettings:
    endpoint: str
    model: str
    max_tokens: int = 8192
    temperature: float = 0.7
    seed: Optional[int] = None
    timeout_s: float = 600.0
    retries: int = 3
    backoff_s: float = 1.0
    api_key_env: str = DEFAULT_KEY_ENV

    def check(self) -> "ClientSettings":
        if not self.endpoint or not self.endpoint.startswith(("http://", "https://")):
            raise AutotuneUsageError(f"--endpoint={self.endpoint!r}: give the base URL of an OpenAI-compatible API, "
                                     "e.g. --endpoint=http://127.0.0.1:8000/v1 or https://api.openai.com/v1")
        if not self.model:
            raise AutotuneUsageError("--model=NAME is required with --tuner=llm (the model name the endpoint serves)")
        if self.max_tokens < 1 or self.timeout_s <= 0 or self.retries < 0 or self.backoff_s < 0:
            raise AutotuneUsageError("--max-tokens must be >= 1, --call-timeout > 0, --retries >= 0, --backoff >= 0")
        return self


@dataclass(frozen=True)
class CallResult:
    """What one logical call (with its retries) gave."""

    content: Optional[str]
    finish_reason: Optional[str]
    usage: dict
    error: Optional[str]
    status: Optional[int]
    latency_s: float
    request_sha256: str
    attempts: int
    log_line: int

    @property
    def completion_tokens(self) -> Optional[int]:
        c = self.usage.get("completion_tokens")
        return c if isinstance(c, int) else None


def api_key(env_name: str, explicit: bool) -> Optional[str]:
    """The key from the environment. A variable named by ``--api-key-env`` must be set; the default one may not be
    (local endpoints need no key)."""
    key = os.environ.get(env_name)
    if not key and explicit:
        raise AutotuneUsageError(f"--api-key-env={env_name}: the environment variable {env_name} is not set; export "
                                 "the key there (it is read from the environment only, never from a file or argument)")
    return key or None


class ChatClient:
    def __init__(self, settings: ClientSettings, log: CallLog, key: Optional[str],
                 sleep: Callable[[float], None] = time.sleep) -> None:
        import openai

        self.settings = settings.check()
        self.log = log
        self._sleep = sleep
        self._openai = openai
        self._client = openai.OpenAI(base_url=settings.endpoint, api_key=key or NO_KEY, max_retries=0,
                                     timeout=settings.timeout_s)

    def request_body(self, messages: list[dict[str, str]]) -> dict[str, Any]:
        s = self.settings
        body: dict[str, Any] = {"model": s.model, "messages": messages, "max_tokens": s.max_tokens,
                                "temperature": s.temperature}
        if s.seed is not None:
            body["seed"] = s.seed
        return body

    def complete(self, messages: list[dict[str, str]], meta: dict[str, Any]) -> CallResult:
        """One chat completion (retried as above), logged with ``meta`` (study, arm, problem, iteration, ...)."""
        body = self.request_body(messages)
        digest = hashlib.sha256(canonical_json(body).encode()).hexdigest()
        started = datetime.now(timezone.utc).isoformat(timespec="seconds")
        attempts: list[dict[str, Any]] = []
        response: Any = None
        status: Optional[int] = None
        error: Optional[str] = None
        t0 = time.perf_counter()
        for k in range(self.settings.retries + 1):
            response, status, error, retry, wait = self._attempt(body, attempts)
            if not retry or k == self.settings.retries:
                break
            delay = min(MAX_BACKOFF_S, self.settings.backoff_s * 2 ** k)
            self._sleep(min(delay, wait) if wait is not None else delay)
        latency = time.perf_counter() - t0
        content, finish, usage = _read(response)
        if error is None and response is not None and not isinstance(response, dict):
            error = "the response body is not a JSON object"
        line = self.log.append({
            **meta, "endpoint": public_endpoint(self.settings.endpoint), "request_sha256": digest, "request": body,
            "status": status, "response": response, "finish_reason": finish, "usage": usage,
            "latency_s": round(latency, 4), "attempts": attempts, "error": error, "started_at": started,
        })
        return CallResult(content, finish, usage, error, status, latency, digest, len(attempts), line)

    def _attempt(self, body: dict[str, Any], attempts: list[dict[str, Any]]
                 ) -> tuple[Any, Optional[int], Optional[str], bool, Optional[float]]:
        """(response body, status, error, retry?, server-asked wait) of one attempt, appended to ``attempts``."""
        openai = self._openai
        t0 = time.perf_counter()
        response: Any = None
        status: Optional[int] = None
        error: Optional[str] = None
        retry, wait = False, None
        try:
            raw = self._client.chat.completions.with_raw_response.create(**body)
            status = int(raw.status_code)
            text = raw.text
            try:
                response = json.loads(text)
            except ValueError:
                response, error = text[:4000], f"HTTP {status}: the response body is not JSON"
        except openai.APITimeoutError:
            error, retry = f"timeout: no answer within the per-call timeout of {self.settings.timeout_s:g} s", True
        except openai.APIConnectionError as e:
            error, retry = f"transport error: {_cause(e)}", True
        except openai.APIStatusError as e:
            status = int(e.status_code)
            response = e.body if isinstance(e.body, (dict, list, str)) else None
            error = f"HTTP {status}: {_message(e)}"
            retry = status >= 500 or status in (408, 429)
            wait = _retry_after(e)
        attempts.append({"status": status, "error": error, "latency_s": round(time.perf_counter() - t0, 4)})
        return response, status, error, retry, wait


def _read(response: Any) -> tuple[Optional[str], Optional[str], dict]:
    """(content, finish_reason, usage) of a chat-completion body; Nones where it has none."""
    if not isinstance(response, dict):
        return None, None, {}
    raw_usage = response.get("usage")
    usage: dict = raw_usage if isinstance(raw_usage, dict) else {}
    choices = response.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return None, None, usage
    choice = choices[0]
    msg = choice.get("message") if isinstance(choice.get("message"), dict) else {}
    content = msg.get("content") if msg else choice.get("text")
    finish = choice.get("finish_reason")
    return (content if isinstance(content, str) else None, finish if isinstance(finish, str) else None, usage)


def _cause(e: BaseException) -> str:
    inner = e.__cause__ or e.__context__
    text = f"{type(inner).__name__}: {inner}" if inner is not None else str(e)
    return text[:300]


def _message(e: Any) -> str:
    body = getattr(e, "body", None)
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])[:300]
    return str(getattr(e, "message", e))[:300]


def _retry_after(e: Any) -> Optional[float]:
    try:
        value = e.response.headers.get("retry-after")
        return float(value) if value is not None else None
    except (AttributeError, TypeError, ValueError):
        return None
