"""One launch of an engine server in an item (docs/guide/engines.md): start → effective configuration → **quality
gate** (before anything of a configuration launch is timed) → warm-up windows (discarded) → measured windows with
the load gauges sampled → **errors** → **treatment delivery** → stop. The server is always stopped (``with
server``), also when a gate refuses inside the window.
"""

from __future__ import annotations

from typing import Optional

from . import localhttp
from .adapters.base import EngineAdapter, FlagSet, LaunchEvidence
from .delivery import judge_delivery
from .item import (
    CONFIG_ARM,
    DEFAULT_ARM,
    SERVED_NAME,
    EngineEnv,
    ItemContext,
    LaunchOutcome,
    Refused,
    base_env,
)
from .loadgen import MetricsSampler, WindowStats, run_window, run_window_sampled
from .metrics import MetricsSnapshot, parse_prometheus
from .placement import load_generator_placed
from .quality import judge, token_agreement
from .server import EngineLaunchError, EngineServer


def launch(env: EngineEnv, ctx: ItemContext, arm: str, index: int, pair: int, flags: FlagSet) -> LaunchOutcome:
    p = env.protocol.engines
    adapter, spec = ctx.adapter, ctx.spec
    log = ctx.log_dir / f"{index + 1:02d}-{arm}.log"
    server_env = {**base_env(), **adapter.env(ctx.inst, ctx.log_dir), **dict(spec.declaration.server_env)}
    server = EngineServer(lambda port: adapter.command(ctx.inst, ctx.model, SERVED_NAME, port, flags),
                          env=server_env, log=log, health_path=adapter.health_path,
                          launch_timeout_s=p.launch_timeout_s, stop_grace_s=p.stop_grace_s)
    try:
        server.start()
    except EngineLaunchError as e:
        if arm == DEFAULT_ARM:
            raise
        # the default starts and this configuration does not: a property of the configuration
        raise Refused("launch", f"the engine does not start with this configuration: {e.cause or 'see its log'} "
                                 f"(log {log})") from e
    with server:
        assert server.record is not None
        env.progress(f"  ready in {server.record.started_s:.1f} s on {server.base_url} (log {log})")
        metrics0 = scrape(adapter, server)
        effective = adapter.effective_config(server.base_url, log.read_text(errors="replace"), metrics0)
        lo = LaunchOutcome(arm, index, pair, flags, effective, [])
        # ---- quality gate: before anything of a configuration launch is timed
        qstats, qres = run_window(server.base_url, SERVED_NAME, ctx.quality_reqs,
                                  concurrency=p.quality_concurrency, timeout_s=p.request_timeout_s)
        if qstats.errors:
            _refuse_errors(env, arm, "quality prompts", qstats, ctx)
        lo.quality_ids = [ctx.builder_ids(r.text) for r in qres]
        if arm == CONFIG_ARM:
            ref = ctx.reference_quality()
            if ref is not None:
                lo.quality = judge(ref, lo.quality_ids, env.protocol.engines.quality_min_agreement, index + 1)
                env.progress(f"  quality gate: {lo.quality.agreement.describe()} -> "
                             f"{'passed' if lo.quality.passed else 'REFUSED'}")
                if not lo.quality.passed:
                    ctx.launches.append(lo)
                    raise Refused("quality", lo.quality.reason())
        elif ctx.launches:
            ref = ctx.reference_quality()
            if ref is not None:
                self_agreement = token_agreement(ref, lo.quality_ids)
                ctx.self_agreements.append(self_agreement)
                if self_agreement.value < env.protocol.engines.quality_min_agreement:
                    ctx.launches.append(lo)
                    raise Refused("quality", (
                        f"the default's greedy outputs are not reproducible between its own launches "
                        f"({self_agreement.describe()}): the quality gate cannot judge a configuration of "
                        f"this engine here; pin the engine's numerics (e.g. dtype) in [server].flags"), "error")
        # ---- warm-up (discarded), then the measured windows with the metrics sampled
        # the load generator leaves the CPUs the engine pinned its workers to (placement.py says why)
        with load_generator_placed(server.server_pid) as placed:
            if placed is not None:
                server.record.notes.append(placed)
                env.progress(f"  {placed}")
            for k, reqs in enumerate(ctx.warmup_reqs):
                ws, _ = run_window(server.base_url, SERVED_NAME, reqs, concurrency=spec.workload.concurrency,
                                   timeout_s=p.request_timeout_s)
                lo.warmup.append(ws)
                if ws.errors:
                    _refuse_errors(env, arm, f"warm-up window {k + 1}", ws, ctx, lo)
            before = scrape(adapter, server)
            maxima: dict[str, float] = {}
            for k, reqs in enumerate(ctx.windows):
                sampler = (MetricsSampler(server.base_url + adapter.metrics_path, adapter.load_gauges,
                                          p.metrics_interval_s) if adapter.metrics_path and adapter.load_gauges else None)
                ws, _ = run_window_sampled(server.base_url, SERVED_NAME, reqs, concurrency=spec.workload.concurrency,
                                           timeout_s=p.request_timeout_s, sampler=sampler)
                lo.windows.append(ws)
                if sampler is not None:
                    for g, v in sampler.maxima.items():
                        maxima[g] = max(maxima.get(g, v), v)
                env.progress(f"  window {k + 1}/{len(ctx.windows)}: {ws.completed}/{ws.requests} requests, "
                             f"{ws.requests_per_s:.2f} req/s, {ws.output_tokens_per_s:.0f} tok/s, "
                             f"p50 latency {_ms(ws.latency_s.get('p50'))}, {ws.errors} errors")
                if ws.errors > p.max_error_rate * ws.requests:
                    _refuse_errors(env, arm, f"window {k + 1}", ws, ctx, lo)
        after = scrape(adapter, server)
        lo.evidence = LaunchEvidence(effective, before, after, maxima,
                                     requests_sent=sum(len(w) for w in ctx.windows), workload=spec.workload)
    lo.record = server.record.to_json() if server.record else {}
    env.progress(f"  stopped in {(server.record.stopped_s or 0):.1f} s")
    if arm == CONFIG_ARM and spec.aa:
        pass  # A/A: the same flags on purpose; there is no treatment whose delivery could be judged
    elif arm == CONFIG_ARM:
        ref_ev = ctx.reference_evidence()
        if ref_ev is not None:
            lo.delivery = judge_delivery(adapter, ctx.default_flags, ctx.config_flags, ref_ev, lo.evidence)
            env.progress(f"  treatment delivery: {'delivered' if lo.delivery.delivered else 'NOT DELIVERED'}: "
                         f"{lo.delivery.reason}")
            if not lo.delivery.delivered:
                ctx.launches.append(lo)
                raise Refused("delivery", lo.delivery.reason)
        else:
            ctx.pending_delivery.append(lo)
    else:
        # a configuration launch that came first (odd pairs) is judged against this default launch
        for pending in ctx.pending_delivery:
            pending.delivery = judge_delivery(adapter, ctx.default_flags, ctx.config_flags, lo.evidence,
                                              pending.evidence)
            if not pending.delivery.delivered:
                ctx.launches.append(lo)
                raise Refused("delivery", pending.delivery.reason)
        ctx.pending_delivery.clear()
    return lo


def _refuse_errors(env: EngineEnv, arm: str, where: str, ws: WindowStats, ctx: ItemContext,
                   lo: Optional[LaunchOutcome] = None) -> None:
    kinds = ", ".join(f"{k} x{n}" for k, n in sorted(ws.error_kinds.items()))
    msg = (f"{ws.errors} of {ws.requests} requests failed in the {arm}'s {where} ({kinds}; first: "
           f"{ws.first_error}); an errored request is never counted as a fast one "
           f"([engines].max_error_rate = {env.protocol.engines.max_error_rate:g})")
    if lo is not None:
        ctx.launches.append(lo)
    if arm == DEFAULT_ARM:
        raise Refused("timing", "the engine's DEFAULT failed requests, so nothing can be compared with it: "
                                 + msg, "error")
    raise Refused("timing", msg)


def scrape(adapter: EngineAdapter, server: EngineServer) -> MetricsSnapshot:
    if not adapter.metrics_path:
        return MetricsSnapshot()
    import httpx

    try:
        with localhttp.client(timeout=10.0) as c:
            r = c.get(server.base_url + adapter.metrics_path)
        if r.status_code == 200:
            return parse_prometheus(r.text)
    except (httpx.HTTPError, ValueError):
        pass
    return MetricsSnapshot()


def _ms(x: Optional[float]) -> str:
    return "-" if x is None else f"{x * 1000:.0f} ms"
