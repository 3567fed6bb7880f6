"""The head start in every CUDA sample (``[devices.cuda].head_start``; docs/architecture.md, "The CUDA sample").

The sample (:mod:`.timing`) flushes the L2 and synchronises the device, then queues a *hold* (:mod:`.hold`: a kernel
that fills every SM) on its stream, records the start event behind it, makes the first call (or the graph's
replay), and releases the hold; the other calls follow, then the end event. The GPU reaches the start event when
the host has queued the first call's kernels, so whatever the host spends before its first kernel reaches the GPU
-- guards, launchers, a cold cache after the synchronisation -- is off the clock, as in
``triton.testing.do_bench`` (which enqueues flush and calls without waiting) and nvbench's ``measure_cold``. The
host queues call 2 while the GPU runs call 1, as in any stream of calls.

**Why the release follows the first call, not the last.** Held until the last launch, a sample would run all its
host work and then all its GPU work: every call's host time would land outside the events and inside the host's
time with the device-wide synchronisation, where ``DeviceClockGate`` looks for hidden work -- an honest compiled
arm with 60 us of launcher a call would read as hiding ``k`` x 60 us, and telling that from hidden work would
mean trusting an enqueue time the sandbox reports. Held for the first call only, the host time beyond the events
holds one call's host path (a compiled anchor's ~0.25 ms against a >= 3 ms sample), the gate's rule is unchanged,
and the launch queue behind the hold holds one call's launches, not ``k`` calls'.

**What stays in the number: the larger of event time and enqueue time.** A call whose host side is slower than its
GPU side (a launch-bound call: a Python loop of small launches) costs its host time in any real use; the events
after the release miss the first call's host part. So every sample measures both, on the device's clock the event
time (start to end) and on the host's the enqueue time (first launch to the end event's record), and reports the
larger -- the throughput bound of a stream of these calls. The rule is the same for both arms; host work an arm
does inside its calls (the answer computed on the CPU, a wait on the host for anything) is in the enqueue time.
GPU work on another stream cannot run during the hold (it holds every SM); what runs on another stream after the
release and past the end event is in the host time with the device-wide synchronisation (``DeviceClockGate``).

**When the hold runs out.** The hold ends by itself after ``head_start_max_s``: a stream held while the host
blocks on it -- a call that synchronises, a first call with more launches than the stream's queue holds -- would
otherwise never move. The sample still counts max(event, enqueue); nothing of the host is hidden, but a host that
waited for the deadline has that wait in its enqueue time. After ``EXPIRIES_BEFORE_OFF`` such samples in a row the
sandbox times the rest of its samples without a hold (the same rule: for a call that synchronises, the host's time
is its cost) and says why in ``timing_info``. Which hold ran, and every count, is in ``timing_info``; each sample
carries its own ``event_seconds``, ``enqueue_seconds``, ``first_call_seconds``, ``hold_seconds``,
``hold_expired`` and ``bound``.

``head_start = "off"`` (protocols 1-8): no hold, and the sample's time is its event time, as before.
"""

from __future__ import annotations

import statistics
from typing import Any, NamedTuple, Optional

import torch

from ..base import Sample
from .driver import Driver
from .hold import HoldFailed, make_hold

#: the hold's deadline where the options do not give one (seconds)
DEFAULT_LIMIT_S = 0.003
#: samples in a row whose hold ran out before the sandbox stops holding
EXPIRIES_BEFORE_OFF = 2
#: samples kept for timing_info's medians
RECENT = 64


class Ticket(NamedTuple):
    pre: Any  # an event recorded just before the hold (its GPU length: pre -> start event)
    token: int


def sample_seconds(event_s: float, enqueue_s: float, host_bound_rule: bool) -> tuple[float, str]:
    """The sample's time and what bounds it: the event time, or -- under the head start's rule -- the host's
    enqueue time where it is longer (``"host"``)."""
    if host_bound_rule and enqueue_s > event_s:
        return enqueue_s, "host"
    return event_s, "device"


class HeadStart:
    """The head start's half of :class:`~pytest_autotune.measure.devices.cuda.device.CudaDevice` (a mixin: the
    state lives on the device instance)."""

    index: int
    options: dict
    _counts: dict[str, Any]

    def _drv(self) -> Driver:
        raise NotImplementedError

    def _head_start_init(self) -> None:
        self._hs_setting = str(self.options.get("head_start", "off") or "off")
        self._hs_limit_s = float(self.options.get("head_start_max_s", DEFAULT_LIMIT_S) or DEFAULT_LIMIT_S)
        self._hold: Any = None
        self._hs_ready = False
        self._hs_active = False
        self._hs_reason = ""
        self._hs_expired_run = 0
        #: (first call's host time, enqueue time, hold by the GPU, expired) of the recent samples
        self._hs_recent: list[tuple[float, float, Optional[float], Optional[bool]]] = []
        self._counts.update(held_samples=0, host_bound_samples=0, hold_expiries=0, hold_failures=0)

    @property
    def host_bound_rule(self) -> bool:
        """Whether samples count max(event, enqueue) (every protocol with a head start)."""
        return self._hs_setting != "off"

    def _head_start_setup(self) -> None:
        """Create the hold (once; before the tamper snapshot, from ``warm_runtime``)."""
        if self._hs_ready:
            return
        self._hs_ready = True
        if self._hs_setting == "off":
            return
        try:
            drv: Optional[Driver] = self._drv()
        except Exception as e:  # noqa: BLE001 - no driver at all: make_hold falls back
            drv, self._hs_reason = None, f"driver: {e}"
        self._hold, why = make_hold(self._hs_setting, drv, self.index, self._hs_limit_s)
        self._hs_active = self._hold is not None
        self._hs_reason = why or self._hs_reason

    def _hold_begin(self) -> Optional[Ticket]:
        """Queue the hold on the current stream (after the flush's synchronisation, before the start event)."""
        if self._hs_setting == "off":
            return None
        self._head_start_setup()
        if not self._hs_active:
            return None
        pre = torch.cuda.Event(enable_timing=True)
        pre.record()
        try:
            token = self._hold.begin(torch.cuda.current_stream(self.index).cuda_stream)
        except (HoldFailed, OSError, ValueError, TypeError) as e:
            self._counts["hold_failures"] += 1
            self._stop_holding(f"{e}: the rest of this sandbox's samples are timed without a hold")
            return None
        return Ticket(pre, token)

    def _hold_release(self, ticket: Optional[Ticket]) -> None:
        """After the first call's launches (or the replay): the GPU may start."""
        if ticket is not None:
            self._hold.release(ticket.token)

    def _stop_holding(self, why: str) -> None:
        self._hs_active = False  # the hold object stays (it is in the tamper snapshot), unused
        self._hs_reason = why

    def _held_sample(self, event_s: float, enqueue_s: float, host_s: float, outputs: list,
                     ticket: Optional[Ticket], start: Any, first_s: float) -> Sample:
        """The sample, after its device-wide synchronisation: its time by the rule, and what the hold did."""
        held_s: Optional[float] = None
        expired: Optional[bool] = None
        name = "off"
        if ticket is not None:
            name = self._hold.name
            try:  # the GPU's own view of the hold: from just before it to the start event
                held_s = ticket.pre.elapsed_time(start) * 1e-3
            except RuntimeError:
                held_s = None
            expired = self._hold.expired(ticket.token)
            self._counts["held_samples"] += 1
            self._note_expiry(bool(expired))
        seconds, bound = sample_seconds(event_s, enqueue_s, self.host_bound_rule)
        if bound == "host":
            self._counts["host_bound_samples"] += 1
        self._hs_recent = (self._hs_recent + [(first_s, enqueue_s, held_s, expired)])[-RECENT:]
        return Sample(seconds=seconds, host_seconds=host_s, outputs=outputs, event_seconds=event_s,
                      enqueue_seconds=enqueue_s, first_call_seconds=first_s, hold_seconds=held_s,
                      hold_expired=expired, head_start=name, bound=bound)

    def _note_expiry(self, expired: bool) -> None:
        if not expired:
            self._hs_expired_run = 0
            return
        self._counts["hold_expiries"] += 1
        self._hs_expired_run += 1
        if self._hs_expired_run >= EXPIRIES_BEFORE_OFF:
            self._stop_holding(
                f"the hold ran out ({self._hs_limit_s * 1e3:g} ms) before the host had enqueued the sample's calls "
                f"in {self._hs_expired_run} samples in a row (a call that synchronises, more launches than the "
                "stream's queue holds, or a host slower than that): the rest of this sandbox's samples are timed "
                "without a hold, still as max(event, enqueue)")

    def head_start_info(self) -> dict[str, Any]:
        """For ``timing_info``: which hold runs and why, the rule, and medians of the recent samples."""
        rec = self._hs_recent
        enq = [r[1] for r in rec]
        first = [r[0] for r in rec]
        held = [r[2] for r in rec if r[2] is not None]
        lag = [r[2] - r[0] for r in rec if r[2] is not None and r[3] is False]

        def med(xs: list) -> Optional[float]:
            return statistics.median(xs) if xs else None

        return {
            "head_start": (self._hold.name if (self._hs_active and self._hold is not None) else
                           "off" if self._hs_ready or self._hs_setting == "off" else "not set up"),
            "head_start_setting": self._hs_setting,
            "head_start_reason": self._hs_reason,
            "head_start_max_s": self._hs_limit_s if self._hs_setting != "off" else None,
            "sample_time": "max(event, enqueue)" if self.host_bound_rule else "event",
            "enqueue_s_median": med(enq), "enqueue_s_max": max(enq) if enq else None,
            # the host's time to the release: the first call (eager) or the replay (graph), off the clock when held
            "first_call_s_median": med(first), "first_call_s_max": max(first) if first else None,
            "hold_s_median": med(held),
            # held (GPU) minus the host's time to the release, on released holds: the hold's launch and release lag
            "release_lag_s_median": med(lag),
        }

    def head_start_watch(self) -> dict[str, Any]:
        """For ``timer_functions``: the hold and its addresses must not change while a candidate is loaded."""
        if self._hold is None:
            return {}
        return {"cuda.hold": self._hold, "cuda.hold.fingerprint": self._hold.fingerprint()}
