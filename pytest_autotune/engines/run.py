"""One engine item, start to verdict (docs/engines.md), in the order of the kernel flow (DESIGN §1):

provenance (engine installed, model made, digests) → launches in ABBA order, each: start → effective
configuration → **quality gate** (configuration launches, before anything of theirs is timed) → warm-up
windows (discarded) → measured windows → **errors** → **treatment delivery** → stop; then the paired ratio with
its bootstrap CI → **breaker** → the result row (``kind = 'engine'``).

The unit of pairing is the window: window ``k`` of the default's launch and window ``k`` of the configuration's
launch in the same launch pair send the same prompts (seed ``k``), back to back on the same machine. The
ratio of a pair is ``(default's seconds per request) / (configuration's)`` = configuration req/s / default req/s,
and the estimate is :func:`pytest_autotune.measure.stats.paired_estimate` over all pairs of all launch pairs.
Launch pairs alternate their order (default first, then configuration first) so neither arm always runs on a
machine that has warmed up longer. One server runs at a time.

Only the default arm erring is an *error* (the engine or the machine cannot serve the workload); the
configuration erring, changing outputs or not delivering its treatment is a *refusal* of the configuration.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Optional

from ..protocol import Protocol
from ..result import ItemOutcome, KernelResult, Measurement, QuarantineRecord
from ..seeds import SeedSource
from .adapters.base import EngineAdapter, FlagSet, LaunchEvidence
from .declaration import AA_CONFIG, DEFAULT_CONFIG, EngineConfig, EngineDeclaration
from .delivery import DeliveryVerdict, changed_flags, judge_delivery
from .install import Installation, find_installation
from .loadgen import MetricsSampler, Request, WindowStats, run_window, run_window_sampled
from .metrics import MetricsSnapshot, parse_prometheus
from .model import MadeModel, make_model
from .quality import QualityVerdict, judge, token_agreement
from .server import EngineLaunchError, EngineServer
from .workload import PromptBuilder, Workload, build_requests

SERVED_NAME = "autotune-tiny"
DEFAULT_ARM = "default"
CONFIG_ARM = "config"


@dataclass(frozen=True)
class EngineItemSpec:
    nodeid: str
    declaration: EngineDeclaration
    config: EngineConfig
    workload: Workload
    device: str

    @property
    def engine(self) -> str:
        return self.declaration.engine

    @property
    def problem(self) -> str:
        """The row's problem: engine and workload (the "problem" an engine configuration is measured on)."""
        return f"{self.engine}:{self.workload.name}"

    @property
    def aa(self) -> bool:
        """The default against itself (``--autotune-aa``): no treatment, so no delivery to judge."""
        return self.config.name == AA_CONFIG and not self.config.flags

    @property
    def item_key(self) -> str:
        """Stable across processes: the paired seeds are derived from it and the run's nonce."""
        return f"engine|{self.engine}|{self.declaration.path.name}|{self.config.name}|{self.workload.name}"


@dataclass
class EngineEnv:
    protocol: Protocol
    adapters: Mapping[str, EngineAdapter]
    nonce: bytes
    run_id: str
    exploratory: bool
    measuring: bool
    log_dir: Path
    model_dir: Path
    progress: Callable[[str], None] = lambda s: None
    release_lookup: Callable[[str, str], Optional[int]] = lambda p, s: None
    item_provenance: Callable[[dict], dict] = lambda facts: dict(facts)
    stats_resamples: Optional[int] = None


@dataclass
class EngineVerdict:
    outcome: ItemOutcome
    result: Optional[KernelResult] = None
    quarantine: Optional[QuarantineRecord] = None


class EngineUnavailable(Exception):
    """The engine cannot be used here (not installed, unsupported): the item is skipped with the fix."""


class _Refused(Exception):
    def __init__(self, gate: str, reason: str, verdict: str = "rejected") -> None:
        super().__init__(reason)
        self.gate = gate
        self.reason = reason
        self.verdict = verdict


@dataclass
class LaunchOutcome:
    arm: str
    index: int
    pair: int
    flags: FlagSet
    effective: Any
    quality_ids: list[list[int]]
    windows: list[WindowStats] = field(default_factory=list)
    warmup: list[WindowStats] = field(default_factory=list)
    evidence: Optional[LaunchEvidence] = None
    record: dict = field(default_factory=dict)
    quality: Optional[QualityVerdict] = None
    delivery: Optional[DeliveryVerdict] = None

    def summary(self) -> dict[str, Any]:
        rps = [w.requests_per_s for w in self.windows]
        return {"arm": self.arm, "index": self.index, "pair": self.pair, "launch": self.record,
                "effective_config_sha256": _digest(self.effective.to_json()) if self.effective else None,
                "requests_per_s": [round(x, 4) for x in rps],
                "output_tokens_per_s": [round(w.output_tokens_per_s, 2) for w in self.windows],
                "warmup_requests_per_s": [round(w.requests_per_s, 4) for w in self.warmup],
                "latency_s": [w.latency_s for w in self.windows], "ttft_s": [w.ttft_s for w in self.windows],
                "itl_s": [w.itl_s for w in self.windows],
                "errors": sum(w.errors for w in self.windows + self.warmup),
                "gauge_maxima": self.evidence.gauge_maxima if self.evidence else {},
                "quality": self.quality.agreement.to_json() if self.quality else None,
                "delivery": self.delivery.to_json() if self.delivery else None}


def _digest(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def _slug(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", s)[:120]


def launch_order(pairs: int) -> list[tuple[int, str]]:
    """(pair, arm) in launch order: ABBA across pairs — default first in even pairs, configuration first in odd."""
    out: list[tuple[int, str]] = []
    for j in range(pairs):
        arms = (DEFAULT_ARM, CONFIG_ARM) if j % 2 == 0 else (CONFIG_ARM, DEFAULT_ARM)
        out += [(j, a) for a in arms]
    return out


class EngineRunner:
    def __init__(self, env: EngineEnv) -> None:
        self.env = env

    # ------------------------------------------------------------------------------------------ preparation
    def adapter_for(self, spec: EngineItemSpec) -> EngineAdapter:
        a = self.env.adapters.get(spec.engine)
        if a is None:
            raise EngineUnavailable(f"no adapter for engine {spec.engine!r} (known: {', '.join(sorted(self.env.adapters))}); "
                                    "register one with the pytest_autotune_engines hook")
        return a

    def installation(self, adapter: EngineAdapter) -> Installation:
        why = adapter.install_unsupported_reason()
        if why:
            raise EngineUnavailable(why)
        inst = find_installation(adapter)
        if inst is None:
            raise EngineUnavailable(f"{adapter.title} is not installed: run `autotune engine install {adapter.name}` "
                                    "(cached for every later run), or pass --autotune-engine-install")
        return inst

    def model(self, spec: EngineItemSpec, adapter: EngineAdapter, inst: Installation) -> MadeModel:
        model = make_model(spec.declaration.model, self.env.model_dir)
        if adapter.model_format == "gguf":
            from .gguf import ensure_gguf

            llama = inst if adapter.name == "llamacpp" else find_installation(self.env.adapters["llamacpp"])
            if llama is None:
                raise EngineUnavailable("a GGUF model needs llama.cpp's converter: autotune engine install llamacpp")
            model = ensure_gguf(model, llama, log=self.env.model_dir / f"{model.path.name}.gguf.log")
        return model

    # ------------------------------------------------------------------------------------------ the item
    def run(self, spec: EngineItemSpec) -> EngineVerdict:
        env, p = self.env, self.env.protocol
        t_item = time.perf_counter()
        adapter = self.adapter_for(spec)
        inst = self.installation(adapter)
        try:
            model = self.model(spec, adapter, inst)
        except Exception as e:  # noqa: BLE001 - making or converting the model failed: the item cannot run
            return EngineVerdict(self._outcome(spec, "error", "model", f"the model could not be prepared: "
                                                                       f"{type(e).__name__}: {e}"))
        decl, cfg, wl = spec.declaration, spec.config, spec.workload
        default_flags, config_flags = decl.default_flags(), decl.flags_of(cfg)
        seeds = SeedSource(env.nonce, spec.item_key)
        n_windows = p.engines.windows_per_launch if env.measuring else 1
        window_seeds = seeds.seeds("windows", max(p.seeds.count, n_windows))
        builder = PromptBuilder(model.path / "tokenizer.json")
        quality_reqs = build_requests(wl, seeds.seed("quality"), builder, count=p.engines.quality_prompts,
                                      max_tokens=p.engines.quality_max_tokens)
        warmup_reqs = [build_requests(wl, seeds.seed("warmup", i), builder) for i in range(p.engines.warmup_windows)]
        windows = [build_requests(wl, s, builder) for s in window_seeds[:n_windows]]
        details: dict[str, Any] = {
            "engine": spec.engine, "config": cfg.name, "workload": wl.to_json(),
            "flags": {"default": adapter.render(default_flags), "config": adapter.render(config_flags),
                      "changed": {k: v for k, v in changed_flags(default_flags, config_flags).items()}},
        }
        facts = {
            "problem_sha256": wl.digest(), "candidate_sha256": decl.arm_digest(config_flags),
            "baseline_sha256": decl.arm_digest(default_flags), "seeds": list(window_seeds),
            "sizes": {"requests": wl.requests, "concurrency": wl.concurrency, "max_tokens": wl.max_tokens,
                      "prompt_tokens": list(wl.prompt_tokens), "shared_prefix_tokens": wl.shared_prefix_tokens,
                      "windows": n_windows, "launch_pairs": p.engines.launch_pairs if env.measuring else 1},
        }
        log_dir = env.log_dir / _slug(spec.nodeid)
        launches: list[LaunchOutcome] = []
        ctx = _ItemContext(spec, adapter, inst, model, default_flags, config_flags, quality_reqs, warmup_reqs,
                           windows, log_dir, launches, details)
        try:
            self._launches(ctx)
        except _Refused as r:
            details["launches"] = [lo.summary() for lo in launches]
            return EngineVerdict(self._outcome(spec, r.verdict, r.gate, r.reason, details=details))
        except EngineLaunchError as e:
            details["launches"] = [lo.summary() for lo in launches]
            return EngineVerdict(self._outcome(spec, "error", "launch", str(e), details=details))
        details["launches"] = [lo.summary() for lo in launches]
        details["quality"] = ctx.quality_summary()
        details["delivery"] = [lo.delivery.to_json() for lo in launches if lo.delivery]
        if not env.measuring:
            return EngineVerdict(self._outcome(
                spec, "accepted", None, "quality gate and treatment delivery passed (not timed: run with --autotune)",
                details=details))
        measurement, pairs = self._estimate(ctx, seeds)
        details["pairs"] = pairs
        warnings: list[str] = []
        if not measurement.ci_target_met:
            warnings.append(f"CI target not reached: the 95% CI is "
                            f"{(measurement.ci_high - measurement.ci_low) / measurement.speedup:.1%} of the ratio wide "
                            f"after {measurement.n_pairs} window pairs in {p.engines.launch_pairs} launch pair(s) "
                            f"(target {p.statistics.ci_target_rel_width:.0%}); engine items measure a fixed number "
                            "of windows ([engines] of the protocol)")
        details["item_seconds"] = round(time.perf_counter() - t_item, 1)
        prov = self._provenance(ctx, facts, measurement)
        breaker = "ok"
        if measurement.speedup > p.breaker.max_speedup:
            release = env.release_lookup(spec.problem, str(facts["candidate_sha256"]))
            if release is None:
                result = self._result(spec, facts, measurement, prov, "tripped")
                from ..gates.breaker import format_speedup

                reason = (f"QUARANTINED: {format_speedup(measurement.speedup)} > {p.breaker.max_speedup:g}x breaker "
                          f"(CI {format_speedup(measurement.ci_low)}-{format_speedup(measurement.ci_high)}): an engine "
                          "configuration this much faster than its own default is an anomaly until a human has looked; "
                          "review it, then `autotune quarantine release ID --reason ...`")
                out = self._outcome(spec, "quarantined", "breaker", reason, measurement=measurement,
                                    warnings=tuple(warnings), details=details)
                return EngineVerdict(out, quarantine=QuarantineRecord(result, reason))
            breaker = f"released:{release}"
            warnings.append(f"breaker released for this configuration digest (release {release})")
        result = self._result(spec, facts, measurement, prov, breaker)
        out = self._outcome(spec, "accepted", None, f"{measurement.n_pairs} window pairs in "
                                                     f"{p.engines.launch_pairs} launch pairs",
                            measurement=measurement, result=result, warnings=tuple(warnings), details=details)
        return EngineVerdict(out, result=result)

    # ------------------------------------------------------------------------------------------ launches
    def _launches(self, ctx: "_ItemContext") -> None:
        p = self.env.protocol.engines
        order = launch_order(p.launch_pairs if self.env.measuring else 1)
        for index, (pair, arm) in enumerate(order):
            flags = ctx.default_flags if arm == DEFAULT_ARM else ctx.config_flags
            self.env.progress(f"launch {index + 1}/{len(order)}: {arm} ({ctx.adapter.render(flags) and ' '.join(ctx.adapter.render(flags)) or 'engine defaults'})")
            lo = self._launch(ctx, arm, index, pair, flags)
            ctx.launches.append(lo)

    def _launch(self, ctx: "_ItemContext", arm: str, index: int, pair: int, flags: FlagSet) -> LaunchOutcome:
        env, p = self.env, self.env.protocol.engines
        adapter, spec = ctx.adapter, ctx.spec
        log = ctx.log_dir / f"{index + 1:02d}-{arm}.log"
        server_env = {**_base_env(), **adapter.env(ctx.inst, ctx.log_dir), **dict(spec.declaration.server_env)}
        server = EngineServer(lambda port: adapter.command(ctx.inst, ctx.model, SERVED_NAME, port, flags),
                              env=server_env, log=log, health_path=adapter.health_path,
                              launch_timeout_s=p.launch_timeout_s, stop_grace_s=p.stop_grace_s)
        try:
            server.start()
        except EngineLaunchError as e:
            if arm == DEFAULT_ARM:
                raise
            # the default starts and this configuration does not: a property of the configuration
            raise _Refused("launch", f"the engine does not start with this configuration: {e.cause or 'see its log'} "
                                     f"(log {log})") from e
        with server:
            assert server.record is not None
            env.progress(f"  ready in {server.record.started_s:.1f} s on {server.base_url} (log {log})")
            metrics0 = self._scrape(adapter, server)
            effective = adapter.effective_config(server.base_url, log.read_text(errors="replace"), metrics0)
            lo = LaunchOutcome(arm, index, pair, flags, effective, [])
            # ---- quality gate: before anything of a configuration launch is timed
            qstats, qres = run_window(server.base_url, SERVED_NAME, ctx.quality_reqs,
                                      concurrency=p.quality_concurrency, timeout_s=p.request_timeout_s)
            if qstats.errors:
                self._errors(arm, "quality prompts", qstats, ctx)
            lo.quality_ids = [ctx.builder_ids(r.text) for r in qres]
            if arm == CONFIG_ARM:
                ref = ctx.reference_quality()
                if ref is not None:
                    lo.quality = judge(ref, lo.quality_ids, self.env.protocol.engines.quality_min_agreement, index + 1)
                    env.progress(f"  quality gate: {lo.quality.agreement.describe()} -> "
                                 f"{'passed' if lo.quality.passed else 'REFUSED'}")
                    if not lo.quality.passed:
                        ctx.launches.append(lo)
                        raise _Refused("quality", lo.quality.reason())
            elif ctx.launches:
                ref = ctx.reference_quality()
                if ref is not None:
                    self_agreement = token_agreement(ref, lo.quality_ids)
                    ctx.self_agreements.append(self_agreement)
                    if self_agreement.value < self.env.protocol.engines.quality_min_agreement:
                        ctx.launches.append(lo)
                        raise _Refused("quality", (
                            f"the default's greedy outputs are not reproducible between its own launches "
                            f"({self_agreement.describe()}): the quality gate cannot judge a configuration of "
                            f"this engine here; pin the engine's numerics (e.g. dtype) in [server].flags"), "error")
            # ---- warm-up (discarded), then the measured windows with the metrics sampled
            for k, reqs in enumerate(ctx.warmup_reqs):
                ws, _ = run_window(server.base_url, SERVED_NAME, reqs, concurrency=spec.workload.concurrency,
                                   timeout_s=p.request_timeout_s)
                lo.warmup.append(ws)
                if ws.errors:
                    self._errors(arm, f"warm-up window {k + 1}", ws, ctx, lo)
            before = self._scrape(adapter, server)
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
                    self._errors(arm, f"window {k + 1}", ws, ctx, lo)
            after = self._scrape(adapter, server)
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
                    raise _Refused("delivery", lo.delivery.reason)
            else:
                ctx.pending_delivery.append(lo)
        else:
            # a configuration launch that came first (odd pairs) is judged against this default launch
            for pending in ctx.pending_delivery:
                pending.delivery = judge_delivery(adapter, ctx.default_flags, ctx.config_flags, lo.evidence,
                                                  pending.evidence)
                if not pending.delivery.delivered:
                    ctx.launches.append(lo)
                    raise _Refused("delivery", pending.delivery.reason)
            ctx.pending_delivery.clear()
        return lo

    def _errors(self, arm: str, where: str, ws: WindowStats, ctx: "_ItemContext",
                lo: Optional[LaunchOutcome] = None) -> None:
        kinds = ", ".join(f"{k} x{n}" for k, n in sorted(ws.error_kinds.items()))
        msg = (f"{ws.errors} of {ws.requests} requests failed in the {arm}'s {where} ({kinds}; first: "
               f"{ws.first_error}); an errored request is never counted as a fast one "
               f"([engines].max_error_rate = {self.env.protocol.engines.max_error_rate:g})")
        if lo is not None:
            ctx.launches.append(lo)
        if arm == DEFAULT_ARM:
            raise _Refused("timing", "the engine's DEFAULT failed requests, so nothing can be compared with it: "
                                     + msg, "error")
        raise _Refused("timing", msg)

    def _scrape(self, adapter: EngineAdapter, server: EngineServer) -> MetricsSnapshot:
        if not adapter.metrics_path:
            return MetricsSnapshot()
        import httpx

        try:
            with httpx.Client(timeout=10.0, trust_env=False) as c:
                r = c.get(server.base_url + adapter.metrics_path)
            if r.status_code == 200:
                return parse_prometheus(r.text)
        except (httpx.HTTPError, ValueError):
            pass
        return MetricsSnapshot()

    # ------------------------------------------------------------------------------------------ statistics
    def _estimate(self, ctx: "_ItemContext", seeds: SeedSource) -> tuple[Measurement, list[dict]]:
        from ..measure.stats import paired_estimate

        p = self.env.protocol
        base: list[float] = []
        cand: list[float] = []
        pairs: list[dict] = []
        for j in range(p.engines.launch_pairs):
            a = next(lo for lo in ctx.launches if lo.pair == j and lo.arm == DEFAULT_ARM)
            b = next(lo for lo in ctx.launches if lo.pair == j and lo.arm == CONFIG_ARM)
            for k, (wa, wb) in enumerate(zip(a.windows, b.windows)):
                base.append(wa.seconds_per_request)
                cand.append(wb.seconds_per_request)
                pairs.append({"pair": j, "window": k, "default_rps": wa.requests_per_s,
                              "config_rps": wb.requests_per_s, "ratio": wb.requests_per_s / wa.requests_per_s})
        est = paired_estimate(base, cand, level=p.statistics.ci_level,
                              resamples=self.env.stats_resamples or p.statistics.bootstrap_resamples,
                              seed=seeds.seed("stats"))
        m = Measurement(n_pairs=est.n_pairs, candidate_s=est.candidate_s, baseline_s=est.baseline_s,
                        speedup=est.speedup, ci_low=est.ci_low, ci_high=est.ci_high,
                        ci_target_met=est.rel_width <= p.statistics.ci_target_rel_width,
                        strawman_speedup=est.speedup, calls_per_sample=ctx.spec.workload.requests,
                        stop_reason=f"{p.engines.launch_pairs} launch pairs x {p.engines.windows_per_launch} windows")
        return m, pairs

    # ------------------------------------------------------------------------------------------ rows
    def _provenance(self, ctx: "_ItemContext", facts: dict, m: Measurement) -> dict:
        from .gguf import gguf_digest

        spec, adapter = ctx.spec, ctx.adapter
        prov = self.env.item_provenance(dict(facts))
        eff_default = next(lo.effective for lo in ctx.launches if lo.arm == DEFAULT_ARM)
        eff_config = next(lo.effective for lo in ctx.launches if lo.arm == CONFIG_ARM)
        arm_seeds = list(facts["seeds"])
        prov["engine"] = {
            "name": spec.engine, "title": adapter.title, "version": ctx.inst.version,
            "reported_version": eff_default.version, "install_recipe_sha256": ctx.inst.recipe_sha256,
            "untested_reason": adapter.untested_reason or None,
        }
        prov["arms"] = {
            "baseline": {"engine": spec.engine, "config": DEFAULT_CONFIG, "argv": adapter.render(ctx.default_flags),
                         "digest": facts["baseline_sha256"], "seeds": arm_seeds,
                         "effective_config": eff_default.to_json()},
            "candidate": {"engine": spec.engine, "config": spec.config.name, "argv": adapter.render(ctx.config_flags),
                          "digest": facts["candidate_sha256"], "seeds": arm_seeds,
                          "effective_config": eff_config.to_json()},
        }
        prov["model"] = {"digest": ctx.model.digest, "spec": dataclasses.asdict(ctx.model.spec),
                         "gguf_sha256": gguf_digest(ctx.model) if adapter.model_format == "gguf" else None}
        prov["workload"] = {"digest": facts["problem_sha256"], "definition": spec.workload.to_json()}
        prov["declaration"] = {"path": str(spec.declaration.path), "sha256": spec.declaration.sha256,
                               "env": dict(spec.declaration.server_env)}
        prov["engine_metric"] = "requests_per_s (config / default, per window pair)"
        prov["quality"] = ctx.quality_summary()
        prov["delivery"] = [lo.delivery.to_json() for lo in ctx.launches if lo.delivery]
        prov["launches"] = [lo.summary() for lo in ctx.launches]
        return _jsonable(prov)

    def _result(self, spec: EngineItemSpec, facts: dict, m: Measurement, prov: dict, breaker: str) -> KernelResult:
        env = self.env
        return KernelResult(
            run_id=env.run_id, kind="engine", nodeid=spec.nodeid, problem=spec.problem,
            problem_sha256=facts["problem_sha256"], candidate=spec.config.name,
            candidate_sha256=facts["candidate_sha256"], baseline=DEFAULT_CONFIG,
            baseline_sha256=facts["baseline_sha256"], device=spec.device, seeds=tuple(facts["seeds"]),
            measurement=m, correctness="passed", probes={"status": "disabled", "reason": "engine item: the quality "
                                                          "gate plays the correctness gate"},
            integrity="passed", breaker=breaker, protocol_sha256=env.protocol.sha256,
            exploratory=env.exploratory, provenance=prov)

    def _outcome(self, spec: EngineItemSpec, verdict: str, gate: Optional[str], reason: str,
                 **kw: Any) -> ItemOutcome:
        details = kw.pop("details", {})
        return ItemOutcome(nodeid=spec.nodeid, kind="engine", problem=spec.problem, candidate=spec.config.name,
                           device=spec.device, verdict=verdict, gate=gate, reason=reason,  # type: ignore[arg-type]
                           baseline=DEFAULT_CONFIG, details=_jsonable(details), **kw)


@dataclass
class _ItemContext:
    spec: EngineItemSpec
    adapter: EngineAdapter
    inst: Installation
    model: MadeModel
    default_flags: FlagSet
    config_flags: FlagSet
    quality_reqs: list[Request]
    warmup_reqs: list[list[Request]]
    windows: list[list[Request]]
    log_dir: Path
    launches: list[LaunchOutcome]
    details: dict
    self_agreements: list = field(default_factory=list)
    pending_delivery: list = field(default_factory=list)

    def __post_init__(self) -> None:
        self._builder = PromptBuilder(self.model.path / "tokenizer.json")

    def builder_ids(self, text: str) -> list[int]:
        return self._builder.ids(text)

    def reference_quality(self) -> Optional[list[list[int]]]:
        return next((lo.quality_ids for lo in self.launches if lo.arm == DEFAULT_ARM), None)

    def reference_evidence(self) -> Optional[LaunchEvidence]:
        for lo in reversed(self.launches):
            if lo.arm == DEFAULT_ARM and lo.evidence is not None:
                return lo.evidence
        return None

    def quality_summary(self) -> dict[str, Any]:
        vs = [lo.quality for lo in self.launches if lo.quality is not None]
        return {"threshold": None if not vs else vs[0].threshold,
                "config_vs_default": [v.agreement.to_json() for v in vs],
                "default_vs_itself": [a.to_json() for a in self.self_agreements],
                "min_agreement": min((v.agreement.value for v in vs), default=None)}


def _ms(x: Optional[float]) -> str:
    return "-" if x is None else f"{x * 1000:.0f} ms"


def _base_env() -> dict[str, str]:
    """What a server inherits from us: a minimal, explicit environment (no proxies, no CUDA/OMP settings, no
    credentials), so that both arms start in the same one and it is recorded."""
    import os

    keep = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "USER", "LOGNAME")
    return {k: os.environ[k] for k in keep if k in os.environ}


def _jsonable(x: Any) -> Any:
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, (str, int, bool)) or x is None:
        return x
    if isinstance(x, Path):
        return str(x)
    return str(x)
