"""The controller's side of a paired timing run's requests (measure/schedule.py): it sends them to both sandboxes,
keeps both sandboxes' CPU books from the kernel (:mod:`.procstat`), pins them where the samples or the work between
rounds runs, and turns a bad reply into a refusal or, where a sandbox ran out of device memory, an error of the
item."""

from __future__ import annotations

import os
import time
from typing import Optional

from ..sandbox.runner import Sandbox, SandboxFailure
from .helper_watch import HelperWatch
from .memory import UNBUDGETED, MemoryPlan, fmt_bytes
from .procstat import CpuWatch
from .timing_records import ARM_ROLES, SampleRecord, TimingRefused


class ScheduleDriver:
    """Sends the schedule's requests and keeps the CPU books of both sandboxes."""

    def __init__(self, boxes: dict[str, Sandbox], sample_cpus: Optional[list[int]],
                 memory: MemoryPlan = UNBUDGETED) -> None:
        self.boxes = boxes
        self.memory = memory
        self.watch = CpuWatch({arm: box.pid for arm, box in boxes.items()})
        self.commands = {arm: 0 for arm in boxes}
        self.sample_cpus = set(sample_cpus or [])
        self.all_cpus = set(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else set()
        self.repin_errors = 0
        self.affinity = {arm: _affinity(box.pid) for arm, box in boxes.items()}
        # the candidate's processes and the GPU's, before every sample of either arm and after every round
        self.helpers = HelperWatch(boxes["B"], boxes["A"])
        self._own_affinity: Optional[set] = None
        #: request kind -> how many times both sandboxes were asked for it (:meth:`both` alternates who goes first)
        self._turns: dict[str, int] = {}

    def __enter__(self) -> "ScheduleDriver":
        """The controller's own thread stays off the CPU where the sandboxes work: off the samples' CPU while they
        sample, on it while they build rounds elsewhere (:meth:`both` with ``spread``). Sharing their CPU, it
        competed with the sandbox that had just answered: the controller waits for that sandbox to leave its CPU
        before reading its clocks (procstat.wait_off_cpu), and on the same CPU the sandbox could not leave until
        the controller yielded -- measured on the 2-vCPU VM, 3.6-5.0 ms between two samples of a round in 5 of 7
        pairs of processes, 0.3 ms once apart; 18,000 yields in one item's 4 s of timing while both shared the
        CPU between rounds (docs/design/protocol.md#derived-input-sets)."""
        if self.sample_cpus and (self.all_cpus - self.sample_cpus) and hasattr(os, "sched_setaffinity"):
            try:
                self._own_affinity = set(os.sched_getaffinity(0))
            except OSError:
                self._own_affinity = None
            self._pin_self(sampling=True)
        return self

    def _pin_self(self, sampling: bool) -> None:
        if self._own_affinity is not None:
            _set_own_affinity((self.all_cpus - self.sample_cpus) if sampling else self.sample_cpus)

    def __exit__(self, *exc: object) -> None:
        if self._own_affinity is not None:
            _set_own_affinity(self._own_affinity)
            self._own_affinity = None

    def _pin(self, cpus: set, order: Optional[list[str]] = None) -> None:
        """Both sandboxes onto ``cpus`` (the controller may; a sandbox could not undo it under the jail's filter),
        in ``order`` (arms)."""
        if not cpus or not self.sample_cpus:
            return
        for box in (self.boxes[arm] for arm in (order or list(self.boxes))):
            try:
                os.sched_setaffinity(box.pid, cpus)
            except OSError:
                self.repin_errors += 1

    def between_rounds_cpus(self) -> set:
        """Where both sandboxes work between samples (a round's release, the next round's inputs): every CPU the
        controller may use except the samples' own, unless that is all there is.

        Why not the samples' CPU too: the sandbox woken first (the baseline's, asked first) stayed on it and the
        other moved away, so only the baseline's inputs and outputs were written in the cache of the CPU that
        then timed them. Measured on a 16-core host (2 MiB L2 a core), the baseline built its inputs there in
        ~100% of rounds and the candidate in 0%, and the bundled Level-1 A/A on the CPU read a median 1.039 (8 of
        8 items above 1, 3 of 8 CIs containing 1.0); with both arms kept off it, 1.003 (4 of 8 above 1, 8 of 8
        CIs containing 1.0). docs/design/protocol.md#where-the-rounds-are-built."""
        return (self.all_cpus - self.sample_cpus) or self.all_cpus

    def both(self, msgs: dict[str, dict], phase: str, spread: bool = False) -> dict[str, dict]:
        """The same kind of request to both sandboxes at once. ``spread``: they may use every CPU but the samples'
        meanwhile (:meth:`between_rounds_cpus`; building inputs in parallel) and are pinned back to the samples'
        CPU when both are done."""
        arms = list(msgs)
        if spread:
            # which sandbox is asked (and moved) first alternates, request kind by request kind: asked in a fixed
            # order, the baseline's always started its round's inputs first on the shared CPU, every round -- an
            # asymmetry of the arm that nothing else removes. Its effect is below the 2-vCPU VM's session-to-session
            # noise (docs/design/protocol.md#the-per-process-offset: the sandboxes asked in turn)
            kind = str(next(iter(msgs.values()), {}).get("cmd"))
            turn = self._turns.get(kind, 0)
            self._turns[kind] = turn + 1
            if turn % 2:
                arms = arms[::-1]
            self._pin(self.between_rounds_cpus(), arms)
            self._pin_self(sampling=False)
        self.watch.begin(*arms, label=phase)
        for arm in arms:
            self.boxes[arm].send(msgs[arm], phase=phase)
            self.commands[arm] += 1
        replies, deltas = {}, {}
        for arm in arms:
            replies[arm] = self.boxes[arm].receive(phase=phase)
            deltas[arm] = self.watch.end(arm, answered_ns=time.perf_counter_ns())
        if spread:
            self._pin(self.sample_cpus, arms)
            self._pin_self(sampling=True)
        for arm, reply in replies.items():
            if reply.get("oom"):
                raise oom_failure(arm, phase, reply, self.memory)
            if not reply.get("ok"):
                raise TimingRefused(f"{phase} failed in the {ARM_ROLES[arm]} sandbox: {reply.get('error')}",
                                    "integrity" if reply.get("refusal") else "timing")
            delta = deltas[arm]
            reply["_cpu_s"] = None if delta is None else delta[0] * 1e-9
            # CPU of the sandbox's threads other than the main one (the harness works on the main thread)
            reply["_other_cpu_s"] = None if delta is None else max(0, delta[0] - delta[1]) * 1e-9
        return replies

    def sample(self, arm: str, group: str, position: int, phase: str) -> SampleRecord:
        box = self.boxes[arm]
        self.helpers.before_sample(arm)
        # the CPUs a sandbox may run on are the controller's to choose: read from the kernel before every sample
        want = self.sample_cpus or self.affinity[arm]
        got = _affinity(box.pid)
        if want and got and got != want:
            raise TimingRefused(f"the {ARM_ROLES[arm]} sandbox runs on CPUs {sorted(got)}, not {sorted(want)}: it "
                                "changed its CPU affinity (a quieter core is a speedup nobody else gets)", "integrity")
        self.watch.begin(arm, label=f"{phase} sample")
        t0 = time.perf_counter_ns()
        reply = box.request({"cmd": "sample", "group": group}, phase=phase)
        t1 = time.perf_counter_ns()
        delta = self.watch.end(arm, sampling=arm, answered_ns=t1)
        self.commands[arm] += 1
        if reply.get("oom"):
            raise oom_failure(arm, f"{phase} (a sample)", reply, self.memory)
        if not reply.get("ok"):
            raise TimingRefused(f"a timed {ARM_ROLES[arm]} sample failed: {reply.get('error')}",
                                "integrity" if reply.get("refusal") else "timing")
        stamps = reply.get("stamps_ns")
        if not (isinstance(stamps, list) and len(stamps) == 2 and all(type(v) is int for v in stamps)):
            stamps = [0, 0]
        try:
            secs, host = float(reply["s"]), float(reply["host_s"])
        except (KeyError, TypeError, ValueError):
            raise TimingRefused(f"the {ARM_ROLES[arm]} sandbox returned a malformed sample") from None
        cpu, main, wait = (None, None, None) if delta is None else (v * 1e-9 for v in delta)
        return SampleRecord(arm, group, position, secs, host, (t0, t1), (stamps[0], stamps[1]), cpu, main, wait,
                            int(reply.get("new_threads", 0) or 0), _int(reply.get("page_faults")))


def _int(value: object) -> int:
    return value if type(value) is int else -1


def _set_own_affinity(cpus: set) -> None:
    try:
        os.sched_setaffinity(0, cpus)
    except OSError:
        pass


def _affinity(pid: int) -> set:
    try:
        return set(os.sched_getaffinity(pid))
    except (OSError, AttributeError):
        return set()


def oom_failure(arm: str, phase: str, reply: dict, plan: MemoryPlan) -> SandboxFailure:
    """The sandbox of ``arm`` ran out of device memory: an error of the item, never a refusal of the candidate (the
    baseline's sandbox runs out as easily when the plan did not hold)."""
    free = reply.get("free_bytes")
    plan_s = (f"; the item's memory plan: {fmt_bytes(plan.available_bytes)} to share, {plan.groups_held} input "
              f"group(s) held, at most {plan.sets_cap or 'any number of'} set(s) a group") if plan.budgeted else ""
    return SandboxFailure("memory", f"the {ARM_ROLES[arm]} sandbox ran out of device memory during {phase} "
                          f"({reply.get('error')})" + (f", {fmt_bytes(free)} free afterwards"
                                                       if isinstance(free, int) else "") + plan_s
                          + ": free the device (other processes hold memory), or declare smaller sizes for this "
                          "device in the problem's AUTOTUNE_SIZES")


__all__ = ["ScheduleDriver", "oom_failure", "UNBUDGETED"]
