"""An asyncio load generator for OpenAI-compatible servers, on httpx.

One *window* sends a fixed list of requests with at most ``concurrency`` in flight and reports what the server
did with them: requests/s and output tokens/s over the window's wall time (first send to last byte), TTFT,
inter-token latency and end-to-end latency percentiles, and errors by kind.

An errored request is never a fast request: it does not count as completed, its time does not enter any
latency, and the window carries the error (the engine flow refuses a window with more errors than the protocol
allows). An error is: a transport error or timeout, an HTTP status other than 200, an ``error`` object in the
stream, a stream that ends without ``[DONE]``, or, when the request asks for a fixed length (``ignore_eos``),
fewer output tokens than asked for: an engine that cuts answers short would otherwise read as faster.

Requests stream (``stream: true`` with ``stream_options.include_usage``) so that TTFT and ITL are the client's
own observations, not the server's claims; token counts come from the final ``usage`` object (each engine's own
tokenizer), or, for a server that sends none, from the number of content chunks.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

import httpx

from . import localhttp

ProgressFn = Callable[[int, int, int, float], None]  # (done, total, errors, elapsed_s)


@dataclass(frozen=True)
class Request:
    """One request of a window. ``prompt`` goes to /v1/completions, ``messages`` to /v1/chat/completions."""

    max_tokens: int
    prompt: Optional[str] = None
    messages: Optional[tuple[tuple[str, str], ...]] = None  # ((role, content), ...)
    ignore_eos: bool = True

    def endpoint(self) -> str:
        return "/v1/chat/completions" if self.messages is not None else "/v1/completions"

    def body(self, model: str, *, stream: bool = True) -> dict[str, Any]:
        b: dict[str, Any] = {"model": model, "max_tokens": self.max_tokens, "temperature": 0.0, "top_p": 1.0,
                             "seed": 0, "stream": stream}
        if stream:
            b["stream_options"] = {"include_usage": True}
        if self.ignore_eos:
            b["ignore_eos"] = True  # vLLM, SGLang and llama.cpp's server all accept it in OpenAI requests
        if self.messages is not None:
            b["messages"] = [{"role": r, "content": c} for r, c in self.messages]
        else:
            b["prompt"] = self.prompt
        return b


@dataclass(frozen=True)
class RequestResult:
    ok: bool
    error: Optional[str]  # kind: "http 503", "timeout", "transport", "short output", "stream error", "no [DONE]"
    latency_s: float
    ttft_s: Optional[float]
    itl_s: tuple[float, ...]
    output_tokens: int
    text: str
    started: float
    ended: float
    detail: str = ""


def percentile(values: Sequence[float], q: float) -> Optional[float]:
    """Linear-interpolated percentile (q in [0, 100]); None for no values."""
    if not values:
        return None
    xs = sorted(values)
    if len(xs) == 1:
        return xs[0]
    pos = (len(xs) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


PERCENTILES = (50, 90, 99)


@dataclass(frozen=True)
class WindowStats:
    requests: int
    completed: int
    errors: int
    error_kinds: dict[str, int]
    duration_s: float
    requests_per_s: float
    output_tokens: int
    output_tokens_per_s: float
    ttft_s: dict[str, Optional[float]]
    itl_s: dict[str, Optional[float]]
    latency_s: dict[str, Optional[float]]
    first_error: str = ""

    @property
    def seconds_per_request(self) -> float:
        """The paired statistic's per-arm time: wall time of the window over completed requests."""
        return self.duration_s / self.completed if self.completed else math.inf

    def to_json(self) -> dict[str, Any]:
        return {"requests": self.requests, "completed": self.completed, "errors": self.errors,
                "error_kinds": dict(self.error_kinds), "duration_s": self.duration_s,
                "requests_per_s": self.requests_per_s, "output_tokens": self.output_tokens,
                "output_tokens_per_s": self.output_tokens_per_s, "ttft_s": self.ttft_s, "itl_s": self.itl_s,
                "latency_s": self.latency_s, "first_error": self.first_error}


def summarize(results: Sequence[RequestResult]) -> WindowStats:
    ok = [r for r in results if r.ok]
    errs = [r for r in results if not r.ok]
    kinds: dict[str, int] = {}
    for r in errs:
        kinds[r.error or "error"] = kinds.get(r.error or "error", 0) + 1
    if results:
        duration = max(r.ended for r in results) - min(r.started for r in results)
    else:
        duration = 0.0
    duration = max(duration, 1e-9)
    tokens = sum(r.output_tokens for r in ok)
    itl = [x for r in ok for x in r.itl_s]
    ttft = [r.ttft_s for r in ok if r.ttft_s is not None]
    lat = [r.latency_s for r in ok]

    def pct(v: Sequence[float]) -> dict[str, Optional[float]]:
        return {f"p{q}": percentile(v, q) for q in PERCENTILES}

    first = next((f"{r.error}: {r.detail}" for r in errs), "")
    return WindowStats(requests=len(results), completed=len(ok), errors=len(errs), error_kinds=kinds,
                       duration_s=duration, requests_per_s=len(ok) / duration, output_tokens=tokens,
                       output_tokens_per_s=tokens / duration, ttft_s=pct(ttft), itl_s=pct(itl), latency_s=pct(lat),
                       first_error=first[:500])


@dataclass
class _Progressive:
    """What a streaming request has seen so far (kept when it times out)."""

    t0: float
    first: Optional[float] = None
    last: Optional[float] = None
    gaps: list = field(default_factory=list)
    chunks: list = field(default_factory=list)
    usage_tokens: Optional[int] = None
    done: bool = False
    failure: Optional[tuple[str, str]] = None

    def piece(self, text: str) -> None:
        now = time.perf_counter()
        if self.first is None:
            self.first = now
        else:
            self.gaps.append(now - (self.last or now))
        self.last = now
        self.chunks.append(text)


async def _stream(client: httpx.AsyncClient, url: str, body: dict, st: _Progressive) -> None:
    async with client.stream("POST", url, json=body) as resp:
        if resp.status_code != 200:
            text = (await resp.aread()).decode("utf-8", "replace")
            st.failure = (f"http {resp.status_code}", text)
            return
        async for line in resp.aiter_lines():
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                st.done = True
                return
            try:
                msg = json.loads(data)
            except ValueError:
                st.failure = ("stream error", f"not JSON: {data[:200]}")
                return
            if not isinstance(msg, dict):
                st.failure = ("stream error", f"not a JSON object: {data[:200]}")
                return
            if "error" in msg:
                st.failure = ("stream error", json.dumps(msg["error"])[:300])
                return
            usage = msg.get("usage")
            if isinstance(usage, dict) and usage.get("completion_tokens") is not None:
                st.usage_tokens = int(usage["completion_tokens"])
            for choice in msg.get("choices") or []:
                piece = choice.get("text")
                if piece is None:
                    piece = (choice.get("delta") or {}).get("content")
                if piece:
                    st.piece(piece)


async def _one(client: httpx.AsyncClient, base_url: str, model: str, req: Request, timeout_s: float) -> RequestResult:
    st = _Progressive(time.perf_counter())

    def result(ok: bool, kind: Optional[str], detail: str = "", tokens: int = 0) -> RequestResult:
        t = time.perf_counter()
        ttft = (st.first - st.t0) if st.first is not None else None
        return RequestResult(ok, kind, t - st.t0, ttft, tuple(st.gaps) if ok else (), tokens, "".join(st.chunks),
                             st.t0, t, detail[:300])

    try:
        await asyncio.wait_for(_stream(client, base_url + req.endpoint(), req.body(model), st), timeout_s)
    except asyncio.TimeoutError:
        return result(False, "timeout", f"no complete answer within {timeout_s:g} s")
    except httpx.HTTPError as e:
        return result(False, "transport", f"{type(e).__name__}: {e}")
    if st.failure is not None:
        return result(False, st.failure[0], st.failure[1])
    if not st.done:
        return result(False, "no [DONE]", "the stream ended without its [DONE] marker")
    n_tokens = st.usage_tokens if st.usage_tokens is not None else len(st.chunks)
    if req.ignore_eos and n_tokens < req.max_tokens:
        return result(False, "short output", f"{n_tokens} output tokens, {req.max_tokens} asked for with ignore_eos",
                      n_tokens)
    return result(True, None, "", n_tokens)


def client(concurrency: int, timeout_s: float) -> httpx.AsyncClient:
    limits = httpx.Limits(max_connections=concurrency + 4, max_keepalive_connections=concurrency + 4)
    # localhttp: no proxy from the environment between the load and a 127.0.0.1 server, one shared SSL context
    return localhttp.async_client(timeout=httpx.Timeout(timeout_s, connect=10.0), limits=limits)


async def run_requests(base_url: str, model: str, requests: Sequence[Request], *, concurrency: int,
                       timeout_s: float, progress: Optional[ProgressFn] = None) -> list[RequestResult]:
    """Send ``requests`` (in order of submission) with at most ``concurrency`` in flight."""
    sem = asyncio.Semaphore(concurrency)
    results: list[Optional[RequestResult]] = [None] * len(requests)
    done = errors = 0
    t0 = time.perf_counter()
    async with client(concurrency, timeout_s) as c:

        async def worker(i: int, req: Request) -> None:
            nonlocal done, errors
            async with sem:
                r = await _one(c, base_url, model, req, timeout_s)
            results[i] = r
            done += 1
            errors += 0 if r.ok else 1
            if progress is not None:
                progress(done, len(requests), errors, time.perf_counter() - t0)

        await asyncio.gather(*(worker(i, r) for i, r in enumerate(requests)))
    return [r for r in results if r is not None]


def run_window(base_url: str, model: str, requests: Sequence[Request], *, concurrency: int, timeout_s: float,
               progress: Optional[ProgressFn] = None) -> tuple[WindowStats, list[RequestResult]]:
    """Blocking wrapper: one window on a fresh event loop."""
    results = asyncio.run(run_requests(base_url, model, requests, concurrency=concurrency, timeout_s=timeout_s,
                                       progress=progress))
    return summarize(results), results


@dataclass
class MetricsSampler:
    """Polls ``url`` (a Prometheus text endpoint) while a window runs and keeps the maximum of chosen gauges:
    how many requests an engine really ran at once is a treatment's evidence (``--max-num-seqs 4``)."""

    url: str
    gauges: tuple[str, ...]
    interval_s: float = 0.25
    maxima: dict[str, float] = field(default_factory=dict)
    samples: int = 0

    async def _run(self, stop: asyncio.Event) -> None:
        from .metrics import parse_prometheus

        async with localhttp.async_client(timeout=5.0) as c:
            while not stop.is_set():
                try:
                    r = await c.get(self.url)
                    if r.status_code == 200:
                        values = parse_prometheus(r.text)
                        self.samples += 1
                        for g in self.gauges:
                            v = values.total(g)
                            if v is not None:
                                self.maxima[g] = max(self.maxima.get(g, v), v)
                except httpx.HTTPError:
                    pass
                try:
                    await asyncio.wait_for(stop.wait(), self.interval_s)
                except asyncio.TimeoutError:
                    pass


def run_window_sampled(base_url: str, model: str, requests: Sequence[Request], *, concurrency: int,
                       timeout_s: float, sampler: Optional[MetricsSampler],
                       progress: Optional[ProgressFn] = None) -> tuple[WindowStats, list[RequestResult]]:
    """:func:`run_window` with ``sampler`` polling the server's metrics for as long as the window runs."""

    async def both() -> list[RequestResult]:
        stop = asyncio.Event()
        task = asyncio.create_task(sampler._run(stop)) if sampler is not None else None
        try:
            return await run_requests(base_url, model, requests, concurrency=concurrency, timeout_s=timeout_s,
                                      progress=progress)
        finally:
            stop.set()
            if task is not None:
                await task

    results = asyncio.run(both())
    return summarize(results), results
