"""Integrity gates: is what the sandbox reported consistent with what the controller can see for itself?

- tamper: no clock, comparison function or torch/numpy name was replaced (checked after import, after
  correctness and after timing; the sandbox reports, so this catches what a candidate does openly);
- wall clock: the samples the sandbox reports must add up to the time the controller measured with its own
  clock around each round (a patched clock that runs slow leaves time unexplained);
- timed outputs: candidate outputs of randomly chosen timed rounds must match golden outputs (a candidate that
  computes honestly only while it is checked is caught);
- threads: no thread may be left running after a timed call;
- baseline sanity: the baseline's time beside the candidate must match its time in a clean process that never
  imported the candidate (a candidate that slows the baseline down is caught);
- device clocks (CUDA): event time against host time with a device-wide synchronisation.
"""

from __future__ import annotations

import secrets
from typing import Optional

from .base import Gate, GateContext, GateOutcome
from .compare import as_list, check_fingerprint


class TamperGate(Gate):
    name = "tamper"
    stages = ("correctness", "integrity")

    def check(self, ctx: GateContext, stage: str) -> Optional[GateOutcome]:
        changed = list(ctx.import_tamper) + list(ctx.details.get("tamper_seen", []))
        if stage == "integrity" and ctx.timing is not None:
            changed += ctx.timing.tamper
        if changed:
            names = sorted(set(changed))
            shown = ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")
            return GateOutcome.refuse("integrity", f"the candidate replaced {shown}", changed=names)
        if ctx.threads_added_by_import > ctx.protocol.integrity.max_new_threads:
            return GateOutcome.refuse(
                "integrity", f"importing the candidate started {ctx.threads_added_by_import} thread(s)")
        return None


class WallClockGate(Gate):
    name = "wall-clock"
    stages = ("integrity",)
    needs_timing = True

    def check(self, ctx: GateContext, stage: str) -> Optional[GateOutcome]:
        ev = ctx.timing
        if ev is None or not ev.rounds:
            return None
        integ = ctx.protocol.integrity
        wall = sum(r.wall_s for r in ev.rounds)
        reported = sum(sum(s[1] for s in r.samples) for r in ev.rounds)  # host-clock seconds
        allowance = len(ev.rounds) * min(ev.rtt_s, integ.wall_clock_slack_s)
        unexplained = wall - reported - allowance
        ctx.details["wall_clock"] = {"controller_s": wall, "reported_s": reported, "unexplained_s": unexplained}
        if reported > wall * 1.001 + 1e-4:
            return GateOutcome.refuse(
                "integrity", f"the sandbox reported {reported:.4f} s of samples inside {wall:.4f} s of the "
                "controller's wall clock: its clock is not the controller's")
        if unexplained > integ.wall_clock_max_unexplained * wall:
            return GateOutcome.refuse(
                "integrity", f"reported samples cover {reported / wall:.0%} of the controller's wall time around "
                f"the timed rounds ({unexplained:.4f} of {wall:.4f} s unexplained, at most "
                f"{integ.wall_clock_max_unexplained:.0%} allowed): the sandbox's clock runs slow or the timed "
                "calls are not what was timed")
        return None


class TimedOutputsGate(Gate):
    name = "timed-outputs"
    stages = ("integrity",)
    needs_timing = True

    def check(self, ctx: GateContext, stage: str) -> Optional[GateOutcome]:
        ev = ctx.timing
        if ev is None or not ev.rounds:
            return None
        n = min(ctx.protocol.integrity.verify_rounds, len(ev.rounds))
        rng = secrets.SystemRandom()
        chosen = sorted(rng.sample(range(len(ev.rounds)), n))
        ctx.details["verified_rounds"] = chosen
        for ri in chosen:
            r = ev.rounds[ri]
            recipes = r.recipes_p1 + r.recipes_p2  # B1 ran on p1, B2 on p2, in this order
            if len(r.prints) != len(recipes):
                return GateOutcome.refuse(
                    "integrity", f"round {ri}: {len(r.prints)} timed outputs reported for {len(recipes)} calls")
            for ci, (recipe, fp) in enumerate(zip(recipes, r.prints)):
                golden = as_list(ctx.golden(recipe))
                if len(fp) != len(golden):
                    return GateOutcome.refuse("integrity", f"round {ri}, call {ci}: output structure changed")
                for t, (g, f) in enumerate(zip(golden, fp)):
                    problem = check_fingerprint(f, g, ctx.protocol)
                    if problem:
                        return GateOutcome.refuse(
                            "integrity", f"timed round {ri}, candidate call {ci}: {problem} (the candidate's "
                            "outputs while timed are not the ones it gave the correctness gate)")
        return None


class ThreadGate(Gate):
    name = "threads"
    stages = ("integrity",)
    needs_timing = True

    def check(self, ctx: GateContext, stage: str) -> Optional[GateOutcome]:
        ev = ctx.timing
        if ev is None:
            return None
        worst = max((r.new_threads for r in ev.rounds), default=0)
        if worst > ctx.protocol.integrity.max_new_threads:
            return GateOutcome.refuse(
                "integrity", f"{worst} thread(s) were left running after a timed round: work continued after "
                "the timed calls returned")
        return None


class BaselineSanityGate(Gate):
    name = "baseline-sanity"
    stages = ("integrity",)
    needs_timing = True

    def check(self, ctx: GateContext, stage: str) -> Optional[GateOutcome]:
        if ctx.timing is None or ctx.timing.estimate is None or ctx.baseline is None:
            return None
        clean = ctx.baseline.clean_per_call_s
        paired = ctx.timing.estimate.baseline_s
        if clean <= 0:
            return None
        ratio = paired / clean
        ctx.details["baseline_sanity"] = {"clean_s": clean, "paired_s": paired, "ratio": ratio}
        limit = ctx.protocol.integrity.baseline_max_slowdown
        if ratio > limit:
            return GateOutcome.refuse(
                "integrity", f"the baseline ran {ratio:.2f}x slower beside the candidate ({paired * 1e3:.3f} ms) "
                f"than in a clean process ({clean * 1e3:.3f} ms; limit {limit:g}x): the candidate slowed the "
                "baseline down")
        return None


class DeviceClockGate(Gate):
    """On devices with their own clock (CUDA events), the host clock with a device-wide synchronisation must
    not see much more time than the device clock did for the candidate than for the baseline."""

    name = "device-clock"
    stages = ("integrity",)
    needs_timing = True

    def check(self, ctx: GateContext, stage: str) -> Optional[GateOutcome]:
        ev = ctx.timing
        if ev is None or not ev.rounds or ctx.device.name != "cuda":
            return None
        ratio_limit = ctx.protocol.devices.cuda.event_host_max_ratio
        k = ev.calls_per_sample
        cand_dev = sum(r.samples[1][0] + r.samples[2][0] for r in ev.rounds)
        cand_host = sum(r.samples[1][1] + r.samples[2][1] for r in ev.rounds)
        base_dev = sum(r.samples[0][0] + r.samples[3][0] for r in ev.rounds)
        base_host = sum(r.samples[0][1] + r.samples[3][1] for r in ev.rounds)
        # host time beyond device time, per call, that the baseline does not also show (launch overheads)
        n_calls = 2 * k * len(ev.rounds)
        excess = (cand_host - cand_dev) - max(base_host - base_dev, 0.0)
        ctx.details["device_clock"] = {"candidate_event_s": cand_dev, "candidate_host_s": cand_host,
                                       "baseline_event_s": base_dev, "baseline_host_s": base_host}
        if cand_dev > 0 and excess > (ratio_limit - 1.0) * cand_dev + 50e-6 * n_calls:
            return GateOutcome.refuse(
                "integrity", f"the host clock saw {cand_host / cand_dev:.1f}x the candidate's event time with a "
                "device-wide synchronisation: work ran outside the timed stream (side streams?)")
        return None
