"""Integrity gates about the candidate's process: is what its sandbox did consistent with doing nothing but its
own calls? (Clock checks are in :mod:`.clocks`, the timed outputs in :mod:`.timed_outputs`.)

- tamper: no clock, comparison function, torch/numpy name or process setting (signal handlers, interval timers,
  collector callbacks, profile hooks, torch modes, ...) was replaced (checked after import, after correctness and
  during and after timing; the sandbox reports, so this catches what a candidate does openly);
- threads: no thread may be left running after a timed call, no thread but the calling one may use CPU during
  the candidate's samples (the controller reads the kernel's CPU clocks), and no helper process may live in the
  sandbox's process group;
- idle: the candidate's sandbox must sleep while it has no request to answer -- in particular while the baseline
  is timed in the other sandbox -- and building a round's inputs must cost it what it costs the baseline's sandbox
  (the same harness code on the same recipes): work found there is the candidate's work moved out of its calls.
"""

from __future__ import annotations

import statistics
from typing import Optional

from ..measure.helper_watch import describe_helpers
from .base import Gate, GateContext, GateOutcome


class TamperGate(Gate):
    name = "tamper"
    stages = ("correctness", "integrity")

    def check(self, ctx: GateContext, stage: str) -> Optional[GateOutcome]:
        changed = list(ctx.import_tamper) + list(ctx.evidence.tamper_seen)
        if stage == "integrity" and ctx.timing is not None:
            changed += ctx.timing.tamper
        if changed:
            names = sorted(set(changed))
            shown = ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")
            return GateOutcome.refuse("integrity", f"the candidate replaced or changed {shown}", changed=names)
        if ctx.threads_added_by_import > ctx.protocol.integrity.max_new_threads:
            return GateOutcome.refuse(
                "integrity", f"importing the candidate started {ctx.threads_added_by_import} thread(s)")
        return None


class ThreadGate(Gate):
    """No work outside the calling thread while the candidate is timed: no thread left running after a timed
    sample (the sandbox's count), no helper process in its process group (counted by the controller from /proc),
    and -- on the CPU device, where all work is CPU work and the protocol fixes the thread count -- no more CPU
    time in the sandbox process than its main thread plus the protocol's extra intra-op threads could use."""

    name = "threads"
    stages = ("integrity",)
    needs_timing = True

    #: CPU seconds beyond the main thread's allowed per timed sample (plus EXTRA_CPU_REL of the main thread's)
    EXTRA_CPU_ABS_S = 25e-6
    EXTRA_CPU_REL = 0.02

    def check(self, ctx: GateContext, stage: str) -> Optional[GateOutcome]:
        ev = ctx.timing
        if ev is None:
            return None
        samples = [s for r in ev.rounds for s in r.candidate]
        measured = [(s, s.cpu_s, s.main_cpu_s) for s in samples if s.cpu_s is not None and s.main_cpu_s is not None]
        if measured and ctx.device.name == "cpu":
            main = sum(m for _, _, m in measured)
            extra = sum(c - m for _, c, m in measured)
            wall = sum((s.window_ns[1] - s.window_ns[0]) * 1e-9 for s, _, _ in measured)
            allowed = ((ctx.protocol.timing.cpu_threads - 1) * wall + self.EXTRA_CPU_REL * main
                       + self.EXTRA_CPU_ABS_S * len(measured))
            ctx.evidence.cpu_time = {"main_thread_s": main, "other_threads_s": extra, "wall_s": wall,
                                       "allowed_other_s": allowed}
            if extra > allowed:
                return GateOutcome.refuse(
                    "integrity", f"threads other than the calling one used {extra * 1e3:.2f} ms of CPU "
                    f"during the candidate's timed samples (the calling thread {main * 1e3:.1f} ms; at most "
                    f"{allowed * 1e3:.2f} ms allowed with [timing].cpu_threads = "
                    f"{ctx.protocol.timing.cpu_threads}): work ran on more cores than the protocol gives every arm")
        helpers = max((r.helper_processes for r in ev.rounds), default=0)
        if ev.helpers:
            ctx.details["processes"] = ev.helpers
            others = [f"pid {o['pid']} {o.get('comm', '?')!r}" for o in ev.helpers.get("others_on_gpu", [])]
            if others and not any(w.startswith("other processes held the GPU") for w in ctx.warnings):
                ctx.warnings.append(f"other processes held the GPU while this item was timed ({', '.join(others)}): "
                                    "they are not the candidate's, but the measurement shared the GPU with them")
        if helpers:
            seen = describe_helpers(ev.helpers) if ev.helpers else ""
            return GateOutcome.refuse(
                "integrity", f"{helpers} helper process(es) of the candidate were alive during the timed rounds"
                f"{': ' + seen if seen else ''} (counted by the controller from the host's /proc"
                f"{', ' + ev.helpers['found_by'] if ev.helpers.get('found_by') else ''}; GPU: "
                f"{ev.helpers.get('gpu', 'not watched')}): work outside the timed calls (a candidate may not run "
                "processes beside the measurement)")
        worst = max((s.new_threads for s in samples), default=0)
        if worst > ctx.protocol.integrity.max_new_threads:
            return GateOutcome.refuse(
                "integrity", f"{worst} thread(s) were left running after a timed sample: work continued after "
                "the timed calls returned")
        return None


def _median_by_arm(per_round: list[dict]) -> dict[str, Optional[float]]:
    out: dict[str, Optional[float]] = {}
    for arm in ("A", "B"):
        vals = [r[arm] for r in per_round if r.get(arm) is not None]
        out[arm] = statistics.median(vals) if vals else None
    return out


class IdleGate(Gate):
    """The candidate's sandbox sleeps while it has nothing to do, and builds inputs as cheaply as the baseline's.

    The controller attributes every CPU nanosecond of both sandboxes to its own requests (busy) or to the time
    between them (idle), reading the kernel's clocks (:mod:`pytest_autotune.measure.procstat`). An honest sandbox
    blocks on its socket between requests; the candidate's may use twice what the baseline's used idle (a runtime's
    own background threads show in both) plus ``idle_cpu_per_command_s`` per request plus ``idle_cpu_rel`` of its
    busy CPU, not counting its largest single interval between two requests (a one-off event; work deferred out of
    the calls recurs, and a single interval carries at most one call's worth of it). Building a round's inputs
    (``prepare``) is the same harness code on the same recipes in both sandboxes on the main thread: the CPU of the
    candidate sandbox's other threads there may exceed the baseline's by at most ``prepare_cpu_abs_s`` (median over
    rounds), and its whole CPU there the baseline's by at most ``prepare_cpu_max_ratio`` and ``prepare_cpu_abs_s``
    (a gross bound: page faults on memory the arm's own kernel left untouched cost an honest candidate up to 1.49x,
    measured). Freeing the last round's outputs (``release``) is not the
    same work in both (other outputs, other heaps, a collector with other objects to visit) and runs while nothing
    is timed: its CPU is reported, not compared."""

    name = "idle"
    stages = ("integrity",)
    needs_timing = True

    def check(self, ctx: GateContext, stage: str) -> Optional[GateOutcome]:
        ev = ctx.timing
        if ev is None or "B" not in ev.cpu or not ev.cpu["B"].get("readable", False):
            return None
        integ = ctx.protocol.integrity
        cand, base = ev.cpu["B"], ev.cpu.get("A", {})
        allowed = (2.0 * float(base.get("idle_s") or 0.0) + integ.idle_cpu_per_command_s * ev.commands.get("B", 0)
                   + integ.idle_cpu_rel * cand["busy_s"])
        ratios = [r.prepare_cpu_s["B"] / r.prepare_cpu_s["A"] for r in ev.rounds
                  if r.prepare_cpu_s.get("A") and r.prepare_cpu_s.get("B") is not None]
        diffs = [r.prepare_cpu_s["B"] - r.prepare_cpu_s["A"] for r in ev.rounds
                 if r.prepare_cpu_s.get("A") is not None and r.prepare_cpu_s.get("B") is not None]
        # the largest single interval is left out: an honest candidate's sandbox once used 3.99 ms in one
        # item against 0.00-0.28 ms in 12 re-runs of it (a one-off event); deferred work recurs in many intervals
        largest = float(cand.get("idle_max_s") or 0.0)
        recurrent = cand["idle_s"] - largest
        ctx.evidence.idle = {"candidate_idle_cpu_s": cand["idle_s"], "allowed_s": allowed,
                               "largest_interval_s": largest, "compared_s": recurrent,
                               "during_baseline_samples_s": cand["during_other_samples_s"],
                               "baseline_idle_cpu_s": base.get("idle_s"),
                               "prepare_cpu_ratio": statistics.median(ratios) if ratios else None,
                               "prepare_cpu_extra_s": statistics.median(diffs) if diffs else None,
                               "release_cpu_s": _median_by_arm([r.release_cpu_s for r in ev.rounds]),
                               "largest_intervals": {"B": cand.get("idle_top", []), "A": base.get("idle_top", [])},
                               "unsettled_reads": {"B": cand.get("unsettled_reads"), "A": base.get("unsettled_reads")},
                               "after_answer_s": {"B": cand.get("after_answer_s"), "A": base.get("after_answer_s")}}
        if recurrent > allowed:
            where = "; ".join(f"{e['s'] * 1e3:.2f} ms after {e['after'] or 'a request'} (main thread "
                              f"{e['main_thread_s'] * 1e3:.2f} ms; {e.get('after_answer_s', 0.0) * 1e3:.2f} ms of it "
                              "after the answer, before the sandbox blocked)" for e in cand.get("idle_top", []))
            return GateOutcome.refuse(
                "integrity", f"the candidate's sandbox used {cand['idle_s'] * 1e3:.2f} ms of CPU while it had no "
                f"request to answer ({cand['during_other_samples_s'] * 1e3:.2f} ms of it while the baseline was "
                f"timed; {recurrent * 1e3:.2f} ms without its largest interval, at most {allowed * 1e3:.2f} ms "
                f"allowed; largest intervals: {where or 'not recorded'}; {cand.get('unsettled_reads', 0)} answers "
                "after which its main thread was still on a CPU when read): work ran outside the candidate's calls")
        others = [r.prepare_other_cpu_s["B"] - r.prepare_other_cpu_s.get("A", 0.0) for r in ev.rounds
                  if r.prepare_other_cpu_s.get("B") is not None and r.prepare_other_cpu_s.get("A") is not None]
        ctx.evidence.idle["prepare_other_threads_extra_s"] = statistics.median(others) if others else None
        if others and statistics.median(others) > integ.prepare_cpu_abs_s:
            return GateOutcome.refuse(
                "integrity", f"while its inputs were built, threads of the candidate's sandbox other than the main one "
                f"used {statistics.median(others) * 1e3:.2f} ms of CPU per round more than the baseline's (median; "
                f"limit {integ.prepare_cpu_abs_s * 1e3:g} ms): the candidate's code ran while its inputs were built")
        if ratios and diffs:
            ratio, extra = statistics.median(ratios), statistics.median(diffs)
            if ratio > integ.prepare_cpu_max_ratio and extra > integ.prepare_cpu_abs_s:
                return GateOutcome.refuse(
                    "integrity", f"building a round's inputs cost the candidate's sandbox {ratio:.2f}x the CPU it "
                    f"cost the baseline's (+{extra * 1e3:.2f} ms per round, median; limit "
                    f"{integ.prepare_cpu_max_ratio:g}x or {integ.prepare_cpu_abs_s * 1e3:g} ms): the candidate's "
                    "code ran while its inputs were built")
        return None
