"""Integrity gates: is what the sandbox reported consistent with what the controller can see for itself?

- tamper: no clock, comparison function or torch/numpy name was replaced (checked after import, after
  correctness and after timing; the sandbox reports, so this catches what a candidate does openly);
- wall clock: the samples the sandbox reports must tile the time the controller measured with its own clock
  around each round (a patched clock that runs slow, or a rewritten sample, leaves time unexplained);
- timed outputs: candidate outputs of randomly chosen timed rounds must match golden outputs (a candidate that
  computes honestly only while it is checked is caught);
- threads: no thread may be left running after a timed call, and (CPU) no thread but the calling one may use
  CPU time during a timed round (the controller reads the kernel's CPU clocks of the sandbox);
- baseline sanity: the baseline's time beside the candidate must match its time in a clean process that never
  imported the candidate (a candidate that slows the baseline down is caught);
- device clocks (CUDA): event time against host time with a device-wide synchronisation.
"""

from __future__ import annotations

import math
import secrets
import statistics
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
            return GateOutcome.refuse("integrity", f"the candidate replaced or changed {shown}",
                                      changed=names)
        if ctx.threads_added_by_import > ctx.protocol.integrity.max_new_threads:
            return GateOutcome.refuse(
                "integrity", f"importing the candidate started {ctx.threads_added_by_import} thread(s)")
        return None


class WallClockGate(Gate):
    """The sandbox's samples against the controller's own clock, round by round.

    Per round the controller knows when it sent "go" and when the answer came (``window_ns``); the sandbox
    reports four samples and, on the same system-wide monotonic clock, the start and end of each
    (``stamps_ns``). An honest round is tiled by its samples: the stamps lie inside the window, each sample
    fills its own bracket, and consecutive samples follow each other within microseconds (between A1 and B1
    the baseline's outputs are scrubbed). Under-reporting a sample -- a clock that runs slow for some calls,
    a sample rewritten after the fact -- leaves time that nothing explains, inside the round (a gap, or a
    bracket longer than its sample) or around it (the unexplained fraction).
    """

    name = "wall-clock"
    stages = ("integrity",)
    needs_timing = True

    #: per round, time hidden inside the candidate's brackets (beyond the baseline's) plus the gaps between
    #: samples B1-B2 and B2-A2 may be at most this many seconds plus HIDDEN_REL of the round's samples
    HIDDEN_ABS_S = 25e-6
    HIDDEN_REL = 0.01
    #: stamps may stray this far outside the controller's window (the two clocks are the same clock)
    SKEW_S = 20e-6
    #: rounds that may break a per-round rule before the item is refused (a preempted round can); at least 2.
    #: A cheat that moves the median of the paired ratios must act in more than half of the rounds, so allowing
    #: a third costs no detection power and keeps preemption on a busy machine from refusing honest items.
    BAD_ROUNDS_REL = 0.34

    def check(self, ctx: GateContext, stage: str) -> Optional[GateOutcome]:
        ev = ctx.timing
        if ev is None or not ev.rounds:
            return None
        integ = ctx.protocol.integrity
        allowance = min(ev.rtt_s, integ.wall_clock_slack_s)
        fractions: list[float] = []
        fast = skewed = hidden = 0
        worst_hidden = 0.0
        for r in ev.rounds:
            reported = sum(s[1] for s in r.samples)  # host-clock seconds
            if reported > r.wall_s + self.SKEW_S:
                fast += 1
            st = r.stamps_ns
            t0, t1 = r.window_ns
            if len(st) != 8 or t1 <= t0:
                fractions.append((r.wall_s - reported - allowance) / r.wall_s if r.wall_s > 0 else 0.0)
                continue
            # the sandbox's span from its first stamp to its last, on its clock, against the controller's window:
            # a clock that runs slow shrinks the span (the work between samples is inside it, and judged below)
            span = (max(st) - min(st)) * 1e-9
            fractions.append((r.wall_s - span - allowance) / r.wall_s if r.wall_s > 0 else 0.0)
            skew = int(self.SKEW_S * 1e9)
            slots = "ABBA"  # the arm of slots A1 B1 B2 A2
            run = sorted(range(4), key=lambda i: st[2 * i])  # slots in the order they ran
            flat = [st[2 * i + j] for i in run for j in (0, 1)]
            if any(b < a for a, b in zip(flat, flat[1:])) or flat[0] < t0 - skew or flat[-1] > t1 + skew:
                skewed += 1
                continue
            inside = [(st[2 * i + 1] - st[2 * i]) * 1e-9 - r.samples[i][1] for i in range(4)]
            h = sum(inside[i] for i in range(4) if slots[i] == "B") - sum(inside[i] for i in range(4) if slots[i] == "A")
            # the sandbox's own work between samples (scrubbing baseline outputs) follows baseline samples only:
            # after a candidate sample the next one starts at once, so any time there is hidden time
            for pos in range(3):
                prev, nxt = run[pos], run[pos + 1]
                if slots[prev] == "B":
                    h += (st[2 * nxt] - st[2 * prev + 1]) * 1e-9
            worst_hidden = max(worst_hidden, h)
            if h > self.HIDDEN_ABS_S + self.HIDDEN_REL * reported:
                hidden += 1
        n = len(ev.rounds)
        bad_allowed = max(2, math.ceil(self.BAD_ROUNDS_REL * n))
        wall = sum(r.wall_s for r in ev.rounds)
        reported_total = sum(sum(s[1] for s in r.samples) for r in ev.rounds)
        median_fraction = statistics.median(fractions)
        ctx.details["wall_clock"] = {
            "controller_s": wall, "reported_s": reported_total,
            "unexplained_s": wall - reported_total - n * allowance,
            "median_unexplained_fraction": median_fraction, "max_unexplained_fraction": max(fractions),
            "rounds": n, "rounds_hidden": hidden, "rounds_skewed": skewed, "rounds_fast": fast,
            "worst_hidden_s": worst_hidden,
        }
        if fast:
            return GateOutcome.refuse(
                "integrity", f"in {fast} of {n} timed rounds the sandbox reported more sample time than the "
                "controller's wall clock saw around the round: its clock is not the controller's")
        if skewed > bad_allowed:
            return GateOutcome.refuse(
                "integrity", f"in {skewed} of {n} timed rounds the sandbox's sample stamps fall outside the "
                "interval the controller's clock saw (or run backwards): its clock is not the controller's")
        if hidden > bad_allowed:
            return GateOutcome.refuse(
                "integrity", f"in {hidden} of {n} timed rounds time is missing inside the round (up to "
                f"{worst_hidden * 1e6:.0f} us between or inside the candidate's samples, at most "
                f"{self.HIDDEN_ABS_S * 1e6:.0f} us + {self.HIDDEN_REL:.0%} allowed): a sample was reported "
                "shorter than it lasted (a clock that runs slow for some calls, or a rewritten sample)")
        if median_fraction > integ.wall_clock_max_unexplained:
            return GateOutcome.refuse(
                "integrity", f"reported samples cover {1 - median_fraction:.0%} of the controller's wall "
                f"time of a typical timed round (median over {n} rounds: {median_fraction:.0%} unexplained, "
                f"at most {integ.wall_clock_max_unexplained:.0%} allowed): the sandbox's clock runs slow or "
                "the timed calls are not what was timed")
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
    """No work outside the calling thread: no thread left running after a timed round (the sandbox's count),
    and -- on the CPU device, where all work is CPU work and the protocol fixes the thread count -- no more
    CPU time in the sandbox process than its main thread plus the protocol's extra intra-op threads could
    use. The CPU clocks are read by the controller from the kernel, around every "go"; threads that start,
    work and end inside a call (extra cores behind the protocol's back) show up there."""

    name = "threads"
    stages = ("integrity",)
    needs_timing = True

    #: CPU seconds beyond the main thread's allowed per timed round (plus EXTRA_CPU_REL of the main thread's)
    EXTRA_CPU_ABS_S = 50e-6
    EXTRA_CPU_REL = 0.02

    def check(self, ctx: GateContext, stage: str) -> Optional[GateOutcome]:
        ev = ctx.timing
        if ev is None:
            return None
        rounds = [r for r in ev.rounds if r.cpu_process_s is not None and r.cpu_main_s is not None]
        if rounds and ctx.device.name == "cpu":
            main = sum(r.cpu_main_s for r in rounds)  # type: ignore[misc]
            extra = sum(r.cpu_process_s - r.cpu_main_s for r in rounds)  # type: ignore[operator]
            wall = sum(r.wall_s for r in rounds)
            allowed = ((ctx.protocol.timing.cpu_threads - 1) * wall + self.EXTRA_CPU_REL * main
                       + self.EXTRA_CPU_ABS_S * len(rounds))
            ctx.details["cpu_time"] = {"main_thread_s": main, "other_threads_s": extra, "wall_s": wall,
                                       "allowed_other_s": allowed}
            if extra > allowed:
                return GateOutcome.refuse(
                    "integrity", f"threads other than the calling one used {extra * 1e3:.2f} ms of CPU "
                    f"during the timed rounds (the calling thread {main * 1e3:.1f} ms; at most "
                    f"{allowed * 1e3:.2f} ms allowed with [timing].cpu_threads = "
                    f"{ctx.protocol.timing.cpu_threads}): work ran on more cores than the protocol gives "
                    "every arm")
        helpers = max((getattr(r, "helper_processes", 0) for r in ev.rounds), default=0)
        if helpers:
            return GateOutcome.refuse(
                "integrity", f"{helpers} helper process(es) of the candidate were alive during the timed rounds: "
                "work outside the timed calls (a candidate may not run processes beside the measurement)")
        worst = max((r.new_threads for r in ev.rounds), default=0)
        if worst > ctx.protocol.integrity.max_new_threads:
            return GateOutcome.refuse(
                "integrity", f"{worst} thread(s) were left running after a timed round: work continued after "
                "the timed calls returned")
        return None


class BaselineSanityGate(Gate):
    """The baseline beside the candidate must run as fast as in a clean sandbox that never imported the
    candidate. The clean sandbox times the baseline on every round's own inputs, with the same calls per
    sample, immediately before or after the item's round (schedule.run_paired_timing), so machine load, cache
    footprint and input sizes are the same for both; the ratio of each round is taken and their median judged."""

    name = "baseline-sanity"
    stages = ("integrity",)
    needs_timing = True

    def check(self, ctx: GateContext, stage: str) -> Optional[GateOutcome]:
        ev = ctx.timing
        if ev is None or not ev.rounds:
            return None
        ratios = []
        paired_calls: list[float] = []
        clean_calls: list[float] = []
        k = ev.calls_per_sample
        for r in ev.rounds:
            if len(r.clean_samples) != 2:
                continue
            paired = r.samples[0][0] + r.samples[3][0]
            clean = r.clean_samples[0][0] + r.clean_samples[1][0]
            if paired > 0 and clean > 0:
                ratios.append(paired / clean)
                paired_calls.append(paired / (2 * k))
                clean_calls.append(clean / (2 * k))
        if not ratios:
            return None
        ratio = statistics.median(ratios)
        paired_s, clean_s = statistics.median(paired_calls), statistics.median(clean_calls)
        ctx.details["baseline_sanity"] = {"clean_s": clean_s, "paired_s": paired_s, "ratio": ratio,
                                          "rounds": len(ratios)}
        limit = ctx.protocol.integrity.baseline_max_slowdown
        if ratio > limit:
            return GateOutcome.refuse(
                "integrity", f"the baseline ran {ratio:.2f}x slower beside the candidate ({paired_s * 1e3:.3f} ms "
                f"per call) than in a clean sandbox timed in the same rounds on the same inputs "
                f"({clean_s * 1e3:.3f} ms; median over {len(ratios)} rounds, limit {limit:g}x): the candidate "
                "slowed the baseline down")
        return None


class DeviceClockGate(Gate):
    """On devices with their own clock (CUDA events), the host clock with a device-wide synchronisation must
    not see much more time than the device clock did for the candidate than for the baseline."""

    name = "device-clock"
    stages = ("integrity",)
    needs_timing = True

    #: host-minus-event time the candidate's samples may show beyond the baseline's, per *sample*. The fixed
    #: host costs of a sample (L2 flush, synchronisations, event records) are the same for both arms and are
    #: what the baseline's own host-minus-event measures; per-call launch costs show up in the event time (the
    #: stream idles between launches), not in host minus event, so the slack does not grow with the calls.
    SLACK_PER_SAMPLE_S = 50e-6

    def check(self, ctx: GateContext, stage: str) -> Optional[GateOutcome]:
        ev = ctx.timing
        if ev is None or not ev.rounds or ctx.device.name != "cuda":
            return None
        ratio_limit = ctx.protocol.devices.cuda.event_host_max_ratio
        cand_dev = sum(r.samples[1][0] + r.samples[2][0] for r in ev.rounds)
        cand_host = sum(r.samples[1][1] + r.samples[2][1] for r in ev.rounds)
        base_dev = sum(r.samples[0][0] + r.samples[3][0] for r in ev.rounds)
        base_host = sum(r.samples[0][1] + r.samples[3][1] for r in ev.rounds)
        # host time beyond device time that the baseline does not also show: work the events did not see
        n_samples = 2 * len(ev.rounds)
        excess = (cand_host - cand_dev) - max(base_host - base_dev, 0.0)
        allowed = (ratio_limit - 1.0) * cand_dev + self.SLACK_PER_SAMPLE_S * n_samples
        ctx.details["device_clock"] = {"candidate_event_s": cand_dev, "candidate_host_s": cand_host,
                                       "baseline_event_s": base_dev, "baseline_host_s": base_host,
                                       "excess_s": excess, "allowed_s": allowed}
        if cand_dev > 0 and excess > allowed:
            return GateOutcome.refuse(
                "integrity", f"the host clock saw {cand_host / cand_dev:.1f}x the candidate's event time with a "
                "device-wide synchronisation: work ran outside the timed stream (side streams?)")
        return None
