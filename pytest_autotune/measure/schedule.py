"""The paired timing schedule, driven by the controller.

Round ``r``: the sandbox prepares two input groups (``k`` distinct input sets each, from seeds the controller
draws now), then runs ``A(p1) B(p1) B(p2) A(p2)`` and returns four raw samples. Every input set is seen exactly
once by each arm, so no arm can replay an earlier answer. After the round, the controller asks for fingerprints
of the candidate outputs at positions it chooses only then. Rounds go on until the CI is narrow enough
(``[statistics].ci_target_rel_width``), ``max_pairs`` is reached or the item's budget is spent.
"""

from __future__ import annotations

import math
import os
import secrets
import sys
import time
from dataclasses import dataclass, field
from typing import Optional

from ..protocol import Protocol
from ..sandbox.runner import Sandbox
from ..seeds import SeedSource
from .stats import PairedEstimate, paired_estimate

#: rounds between two tamper snapshots during timing (one more is taken after the last round)
TAMPER_EVERY = 8


class TimingRefused(Exception):
    """The sandbox misbehaved during timing in a way that is the candidate's doing (gate ``timing``)."""


@dataclass
class RoundRecord:
    index: int
    recipes_p1: list
    recipes_p2: list
    samples: list  # [[device_s, host_s] x 4] in order A1 B1 B2 A2
    wall_s: float  # controller's clock from "go" sent to samples received
    prints: list  # candidate output fingerprints: [B1 calls..., B2 calls...]
    new_threads: int
    #: the controller's ``perf_counter_ns`` when "go" was sent and when its answer arrived
    window_ns: tuple = (0, 0)
    #: the sandbox's own ``perf_counter_ns`` around each sample, [start, end] x 4 (A1 B1 B2 A2); the same
    #: system-wide monotonic clock as the controller's, so they must lie inside ``window_ns``
    stamps_ns: list = field(default_factory=list)
    #: CPU seconds the sandbox process (all its threads) and its main thread used around "go", read by the
    #: controller from the kernel's per-process/per-thread CPU clocks (None where the OS has no such clocks)
    cpu_process_s: Optional[float] = None
    cpu_main_s: Optional[float] = None
    #: the baseline timed in the clean sandbox on this round's inputs, in the same window: [[dev_s, host_s]] x 2
    clean_samples: list = field(default_factory=list)
    #: "ABBA" or "BAAB" (samples and stamps are per slot A1 B1 B2 A2 either way)
    order: str = "ABBA"
    #: other live processes in the sandbox's process group after the round, counted by the controller
    helper_processes: int = 0


@dataclass
class TimingEvidence:
    calls_per_sample: int
    rounds: list[RoundRecord] = field(default_factory=list)
    estimate: Optional[PairedEstimate] = None
    ci_target_met: bool = False
    stop_reason: str = ""
    rtt_s: float = 0.0
    calibration: dict = field(default_factory=dict)
    tamper: list[str] = field(default_factory=list)
    elapsed_s: float = 0.0

    def pairs(self) -> tuple[list[float], list[float]]:
        """Per-call (baseline, candidate) times of each pair (two pairs per round)."""
        k = self.calls_per_sample
        base, cand = [], []
        for r in self.rounds:
            a1, b1, b2, a2 = (s[0] / k for s in r.samples)
            base += [a1, a2]
            cand += [b1, b2]
        return base, cand


def choose_calls_per_sample(per_call_s: dict[str, float], proto: Protocol) -> int:
    fastest = max(min(per_call_s.values()), 1e-9)
    k = math.ceil(proto.timing.min_sample_s / fastest)
    return int(min(max(k, 1), proto.timing.max_calls_per_sample))


def _cpu_clocks(pid: int) -> Optional[tuple[int, int]]:
    """(process CPU ns, main-thread CPU ns) of another process, read by the controller from the kernel, so the
    sandbox cannot forge them (Linux; ``None`` elsewhere). The process clock is the one glibc's
    ``clock_getcpuclockid`` names (CPUCLOCK_SCHED: every thread, exited ones included); the main thread's (its
    tid is the pid) comes from ``/proc/PID/task/PID/schedstat``, since the kernel serves per-thread CPU clocks
    only to the thread's own process."""
    if not sys.platform.startswith("linux") or pid <= 0:
        return None
    try:
        process = time.clock_gettime_ns(((~pid) << 3) | 2)
        with open(f"/proc/{pid}/task/{pid}/schedstat", "rb") as f:
            main_thread = int(f.read().split()[0])
    except (OSError, OverflowError, ValueError, IndexError):
        return None
    return process, main_thread


def _group_helpers(pid: int) -> int:
    """Processes other than the sandbox itself in the sandbox's process group (Linux; 0 elsewhere), counted by
    the controller from /proc: a candidate that forks helpers to run while the baseline is timed (and stops them
    while it runs itself) is seen here, whatever it reports."""
    if not sys.platform.startswith("linux") or pid <= 0:
        return 0
    n = 0
    try:
        entries = os.listdir("/proc")
    except OSError:
        return 0
    for e in entries:
        if not e.isdigit() or int(e) == pid:
            continue
        try:
            with open(f"/proc/{e}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2:].split()
        if len(fields) > 2 and fields[0] != b"Z" and int(fields[2]) == pid:  # state, ppid, pgrp
            n += 1
    return n


def _stamps(go: dict) -> list:
    st = go.get("stamps_ns")
    if isinstance(st, list) and len(st) == 8 and all(type(v) is int for v in st):
        return st
    return []


def _clean_round(clean: Sandbox) -> list:
    """The clean sandbox times the baseline on the inputs it prepared for this round."""
    got = clean.request({"cmd": "go_baseline"}, phase="timing (clean baseline)")
    samples = got.get("samples")
    if not got.get("ok") or not isinstance(samples, list) or len(samples) != 2:
        raise TimingRefused(f"the clean baseline round failed: {got.get('error')}")
    return samples


def measure_rtt(box: Sandbox, n: int = 5) -> float:
    best = float("inf")
    for _ in range(n):
        t0 = time.perf_counter()
        box.request({"cmd": "ping"}, phase="timing")
        best = min(best, time.perf_counter() - t0)
    return best


def run_paired_timing(box: Sandbox, proto: Protocol, seeds: SeedSource, *, stats_seed: int,
                      budget_s: Optional[float] = None, clean: Optional[Sandbox] = None) -> TimingEvidence:
    """``clean``: a sandbox that never imported the candidate (baseline against itself). It times the baseline on
    every round's inputs right before (even rounds) or after (odd rounds) the item's round, so the baseline-sanity
    gate compares the two under the same machine load, with the same calls per sample and the same inputs."""
    t = proto.timing
    st = proto.statistics

    def recipe(purpose: str, i: int) -> dict:
        return {"seed": seeds.seed(purpose, i)}

    t_start = time.perf_counter()
    warm = [recipe("warmup", i) for i in range(max(1, t.warmup_calls))]
    cal = box.request({"cmd": "calibrate", "warmup": warm}, phase="warm-up")
    if not cal.get("ok"):
        raise TimingRefused(f"warm-up failed: {cal.get('error')}")
    per_call = cal["per_call_s"]
    k = choose_calls_per_sample(per_call, proto)
    if clean is not None:
        ccal = clean.request({"cmd": "calibrate", "warmup": warm}, phase="warm-up (clean baseline)")
        if not ccal.get("ok"):
            raise TimingRefused(f"warm-up of the clean baseline failed: {ccal.get('error')}")
    ev = TimingEvidence(calls_per_sample=k, calibration=per_call)
    ev.tamper += cal.get("tamper", [])
    ev.rtt_s = measure_rtt(box)
    budget = t.item_budget_s if budget_s is None else budget_s
    n_seed = 0
    while True:
        r_index = len(ev.rounds)
        p1 = [recipe("timing", n_seed + j) for j in range(k)]
        p2 = [recipe("timing", n_seed + k + j) for j in range(k)]
        n_seed += 2 * k
        # both sandboxes build the round's inputs at once (nothing is timed meanwhile: two cores, half the wait)
        box.send({"cmd": "prepare", "p1": p1, "p2": p2}, phase="timing")
        if clean is not None:
            clean.send({"cmd": "prepare", "p1": p1, "p2": p2}, phase="timing (clean baseline)")
        prep = box.receive(phase="timing")
        if not prep.get("ok"):
            raise TimingRefused(f"preparing round {r_index} failed: {prep.get('error')}")
        if clean is not None:
            cprep = clean.receive(phase="timing (clean baseline)")
            if not cprep.get("ok"):
                raise TimingRefused(f"preparing the clean baseline failed: {cprep.get('error')}")
        clean_samples: list = []
        if clean is not None and r_index % 2 == 0:
            clean_samples = _clean_round(clean)
        cpu0 = _cpu_clocks(box.pid)
        t0 = time.perf_counter_ns()
        order = "BAAB" if (t.order == "ABBA/BAAB" and r_index % 2 == 1) else "ABBA"
        go = box.request({"cmd": "go", "order": order}, phase="timing")
        t1 = time.perf_counter_ns()
        cpu1 = _cpu_clocks(box.pid)
        wall = (t1 - t0) * 1e-9
        if not go.get("ok"):
            raise TimingRefused(f"timed round {r_index} failed: {go.get('error')}")
        fp = box.request({"cmd": "fingerprint", "positions_seed": secrets.randbits(63),
                          "tamper": r_index % TAMPER_EVERY == 0}, phase="timing")
        if not fp.get("ok"):
            raise TimingRefused(f"reading round {r_index} outputs failed: {fp.get('error')}")
        ev.tamper += fp.get("tamper", [])
        samples = go["samples"]
        if (not isinstance(samples, list) or len(samples) != 4
                or not all(isinstance(s, list) and len(s) == 2 for s in samples)):
            raise TimingRefused("the sandbox returned malformed samples")
        if clean is not None and r_index % 2 == 1:
            clean_samples = _clean_round(clean)
        if go.get("order", "ABBA") != order:
            raise TimingRefused(f"round {r_index} ran in order {go.get('order')!r}, {order!r} was asked")
        rec = RoundRecord(r_index, p1, p2, samples, wall, fp["prints"], int(go.get("new_threads", 0)),
                          window_ns=(t0, t1), stamps_ns=_stamps(go), clean_samples=clean_samples, order=order)
        rec.helper_processes = _group_helpers(box.pid)
        if cpu0 is not None and cpu1 is not None:
            rec.cpu_process_s = (cpu1[0] - cpu0[0]) * 1e-9
            rec.cpu_main_s = (cpu1[1] - cpu0[1]) * 1e-9
        ev.rounds.append(rec)
        n_pairs = 2 * len(ev.rounds)
        elapsed = time.perf_counter() - t_start
        if n_pairs >= t.min_pairs and (n_pairs - t.min_pairs) % t.check_every < 2:
            base, cand = ev.pairs()
            try:
                ev.estimate = paired_estimate(base, cand, level=st.ci_level, resamples=st.bootstrap_resamples,
                                              seed=stats_seed)
            except ValueError as e:
                raise TimingRefused(str(e)) from None
            if ev.estimate.rel_width <= st.ci_target_rel_width:
                ev.ci_target_met = True
                ev.stop_reason = f"CI narrower than {st.ci_target_rel_width:.0%} after {n_pairs} pairs"
                break
        if n_pairs >= t.max_pairs:
            ev.stop_reason = f"max_pairs ({t.max_pairs}) reached"
            break
        if elapsed >= budget and n_pairs >= t.min_pairs:
            ev.stop_reason = f"item budget of {budget:g} s spent after {n_pairs} pairs"
            break
    final = box.request({"cmd": "tamper"}, phase="timing")
    if not final.get("ok"):
        raise TimingRefused(f"the tamper check after timing failed: {final.get('error')}")
    ev.tamper += final.get("tamper", [])
    base, cand = ev.pairs()
    try:
        ev.estimate = paired_estimate(base, cand, level=st.ci_level, resamples=st.bootstrap_resamples,
                                      seed=stats_seed)
    except ValueError as e:
        raise TimingRefused(str(e)) from None
    if not ev.ci_target_met and ev.estimate.rel_width <= st.ci_target_rel_width:
        ev.ci_target_met = True
    ev.elapsed_s = time.perf_counter() - t_start
    return ev
