"""One engine item, start to verdict (docs/guide/engines.md), in the order of the kernel flow (docs/architecture.md#the-flow). The item's values are in :mod:`.item`, one server launch in :mod:`.launch`; here:

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
import time
from typing import Any, Optional

from ..jsonable import jsonable
from ..result import ItemOutcome, KernelResult, Measurement, QuarantineRecord
from ..seeds import SeedSource
from .adapters.base import EngineAdapter
from .declaration import DEFAULT_CONFIG
from .delivery import changed_flags
from .install import Installation, find_installation
from .item import (
    CONFIG_ARM,
    DEFAULT_ARM,
    EngineEnv,
    EngineItemSpec,
    EngineUnavailable,
    EngineVerdict,
    ItemContext,
    LaunchOutcome,
    Refused,
    launch_order,
    slug,
)
from .launch import launch
from .model import MadeModel, make_model
from .server import EngineLaunchError
from .workload import PromptBuilder, build_requests

# where the engine plugin, tests and harness import them from
__all__ = ["EngineEnv", "EngineItemSpec", "EngineRunner", "EngineUnavailable", "EngineVerdict", "launch_order"]


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
        log_dir = env.log_dir / slug(spec.nodeid)
        launches: list[LaunchOutcome] = []
        ctx = ItemContext(spec, adapter, inst, model, default_flags, config_flags, quality_reqs, warmup_reqs,
                           windows, log_dir, launches, details)
        try:
            self._launches(ctx)
        except Refused as r:
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
                            f"(target {p.statistics.ci_target_rel_width:.1%}); engine items measure a fixed number "
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
    def _launches(self, ctx: ItemContext) -> None:
        p = self.env.protocol.engines
        order = launch_order(p.launch_pairs if self.env.measuring else 1)
        for index, (pair, arm) in enumerate(order):
            flags = ctx.default_flags if arm == DEFAULT_ARM else ctx.config_flags
            self.env.progress(f"launch {index + 1}/{len(order)}: {arm} ({ctx.adapter.render(flags) and ' '.join(ctx.adapter.render(flags)) or 'engine defaults'})")
            lo = launch(self.env, ctx, arm, index, pair, flags)
            ctx.launches.append(lo)
    # ------------------------------------------------------------------------------------------ statistics
    def _estimate(self, ctx: ItemContext, seeds: SeedSource) -> tuple[Measurement, list[dict]]:
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
    def _provenance(self, ctx: ItemContext, facts: dict, m: Measurement) -> dict:
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
        return jsonable(prov)

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
                           baseline=DEFAULT_CONFIG, details=jsonable(details), **kw)
