"""The head start's hold: what keeps a sample's stream waiting, behind the L2 flush, while the host enqueues the
sample's calls (docs/architecture.md, "The CUDA sample"; the sample's side is :mod:`.head_start`).

Three mechanisms, named by ``[devices.cuda].head_start``:

- ``"spin"`` (:class:`SpinHold`): a one-thread kernel that spins on a flag in pinned host memory mapped into the
  device until the host writes the sample's number into it -- NVIDIA nvbench's blocking kernel (``measure_cold``).
  The host releases it after its last launch, so the hold lasts exactly as long as the host needs, whatever that
  is. The kernel also ends by itself ``head_start_max_s`` after it began: a held stream can deadlock, because a
  call that synchronises (``.item()``, ``torch.cuda.synchronize()``, a ``cudaDeviceSynchronize`` in an
  extension) waits for the GPU while the GPU waits for the host, and so does a launch once the stream's queue is
  full (about 1,000 pending launches). It writes, into the same mapped page, whether it was released or ran out.
  The kernel is PTX (below) compiled by the driver's JIT at setup: the GPU host has no CUDA compiler, and the
  harness needs no package for one kernel of twenty instructions.
- ``"sleep"`` (:class:`SleepHold`): ``torch.cuda._sleep`` for a number of clock cycles -- a delay the host cannot
  end early. Its length is a guess of the host's time (twice the longest enqueue of the last samples, within
  [0.5 ms, ``head_start_max_s``]); the fallback where the spin kernel cannot be set up.
- ``"off"``: no hold (protocols 1-8).

``cuStreamWaitValue32`` (the stream waits in the GPU's front end for a host-written value) was the third candidate
and is not used: it has no deadline, so a call that synchronises inside the hold, or more launches than the queue
holds, would hang the sandbox until its phase timeout.

Everything here lives on the device instance; this module is in the sandbox's tamper snapshot.
"""

from __future__ import annotations

import ctypes
from typing import Any, NamedTuple, Optional

import torch

from .driver import CU_DEVICE_ATTRIBUTE_CLOCK_RATE, Driver, DriverError

#: The spin kernel: hold(flag, seq, limit_ns, status). Spins until ``*flag == seq`` or ``limit_ns`` passed on the
#: GPU's global timer, then writes status[1] = 1 if it ran out (0 if released), status[2..3] = nanoseconds held and
#: status[0] = seq last (the host reads the status only when status[0] is its sample's number). Generic addressing,
#: volatile loads: every poll reads host memory anew.
HOLD_PTX = r"""
.version 7.0
.target sm_70
.address_size 64

.visible .entry autotune_hold(
	.param .u64 autotune_hold_flag,
	.param .u32 autotune_hold_seq,
	.param .u64 autotune_hold_limit,
	.param .u64 autotune_hold_status
)
{
	.reg .pred 	%p<3>;
	.reg .b32 	%r<5>;
	.reg .b64 	%rd<9>;

	ld.param.u64 	%rd1, [autotune_hold_flag];
	ld.param.u32 	%r1, [autotune_hold_seq];
	ld.param.u64 	%rd2, [autotune_hold_limit];
	ld.param.u64 	%rd3, [autotune_hold_status];
	mov.u64 	%rd4, %globaltimer;
	add.s64 	%rd5, %rd4, %rd2;
	mov.u32 	%r3, 0;
$L_spin:
	ld.volatile.u32 	%r2, [%rd1];
	setp.eq.s32 	%p1, %r2, %r1;
	@%p1 bra 	$L_done;
	mov.u64 	%rd6, %globaltimer;
	setp.lt.u64 	%p2, %rd6, %rd5;
	@%p2 bra 	$L_spin;
	mov.u32 	%r3, 1;
$L_done:
	mov.u64 	%rd7, %globaltimer;
	sub.s64 	%rd8, %rd7, %rd4;
	st.volatile.u32 	[%rd3+4], %r3;
	st.volatile.u64 	[%rd3+8], %rd8;
	membar.sys;
	st.volatile.u32 	[%rd3], %r1;
	membar.sys;
	ret;
}
"""
HOLD_KERNEL = "autotune_hold"
#: the mapped page: the flag at offset 0, the kernel's status at STATUS_OFFSET (seq u32, expired u32, ns u64)
PAGE_BYTES = 4096
STATUS_OFFSET = 64
#: the sleep hold's shortest length, and the multiple of the host's recent enqueue time it covers
SLEEP_MIN_S = 0.5e-3
SLEEP_COVER = 2.0
#: the clock a sleep's cycles are counted at when the driver does not say (an H200's SM clock is ~1.98 GHz)
DEFAULT_CLOCK_HZ = 2.0e9


class HoldFailed(RuntimeError):
    """The hold could not be queued (the sample goes on without it)."""


class Outcome(NamedTuple):
    """What the GPU reports about one hold, read after the sample's synchronisation: whether it ran out before the
    host released it (``None``: not known) and how long it held, by the GPU's clock (``None``: not known)."""

    expired: Optional[bool]
    held_s: Optional[float]


class SpinHold:
    """nvbench's blocking kernel with a deadline: see the module docstring. One per sandbox, set up before the
    tamper snapshot; the page is never handed to anything but the kernel."""

    name = "spin"

    def __init__(self, drv: Driver, limit_s: float) -> None:
        self._drv = drv
        self.limit_ns = int(limit_s * 1e9)
        self.module, self.function = drv.load_function(HOLD_PTX, HOLD_KERNEL)
        self.host, self.dev = drv.host_alloc(PAGE_BYTES)
        ctypes.memset(self.host, 0, PAGE_BYTES)
        self._seq = 0

    def fingerprint(self) -> tuple:
        """What must not change while a candidate is loaded (compared by value in the tamper snapshot)."""
        return (self.name, self.limit_ns, self.module, self.function, self.host, self.dev)

    def begin(self, stream: int) -> int:
        """Queue the hold on ``stream``; returns the sample's number, which releases it."""
        self._seq = self._seq % 0x7FFFFFFF + 1
        args = [ctypes.c_uint64(self.dev), ctypes.c_uint32(self._seq), ctypes.c_uint64(self.limit_ns),
                ctypes.c_uint64(self.dev + STATUS_OFFSET)]
        rc = self._drv.launch(self.function, stream, args)
        if rc != 0:
            raise HoldFailed(f"cuLaunchKernel of the hold failed with CUresult {rc}")
        return self._seq

    def release(self, token: int) -> None:
        ctypes.c_uint32.from_address(self.host).value = token

    def outcome(self, token: int, enqueue_s: float, gpu_held_s: Optional[float]) -> Outcome:
        status = (ctypes.c_uint32 * 2).from_address(self.host + STATUS_OFFSET)
        if status[0] != token:  # the kernel has not reported this sample (it did not run)
            return Outcome(None, gpu_held_s)
        held_ns = ctypes.c_uint64.from_address(self.host + STATUS_OFFSET + 8).value
        return Outcome(bool(status[1]), held_ns * 1e-9)

    def observe(self, enqueue_s: float) -> None:
        return None

    def close(self) -> None:
        self._drv.host_free(self.host)


class SleepHold:
    """A delay kernel (``torch.cuda._sleep``) long enough for the host by a guess: see the module docstring."""

    name = "sleep"

    def __init__(self, clock_hz: float, limit_s: float) -> None:
        self.clock_hz = clock_hz
        self.limit_s = limit_s
        self.recent: list[float] = []
        self.length_s = min(SLEEP_MIN_S, limit_s)

    def fingerprint(self) -> tuple:
        return (self.name, self.clock_hz, self.limit_s)

    def begin(self, stream: int) -> int:
        try:
            torch.cuda._sleep(int(self.length_s * self.clock_hz))
        except (AttributeError, RuntimeError) as e:
            raise HoldFailed(f"torch.cuda._sleep: {e}") from None
        return 0

    def release(self, token: int) -> None:
        return None

    def outcome(self, token: int, enqueue_s: float, gpu_held_s: Optional[float]) -> Outcome:
        # the host was not done when the delay ended: the GPU waited for launches inside the timed region
        return Outcome(None if gpu_held_s is None else enqueue_s > gpu_held_s, gpu_held_s)

    def observe(self, enqueue_s: float) -> None:
        self.recent = (self.recent + [enqueue_s])[-8:]
        self.length_s = min(self.limit_s, max(SLEEP_MIN_S, SLEEP_COVER * max(self.recent)))

    def close(self) -> None:
        return None


def make_hold(setting: str, drv: Optional[Driver], index: int, limit_s: float) -> tuple[Any, str]:
    """The hold ``setting`` asks for, or the fallback this machine allows: (hold or None, why it is not the one
    asked for -- "" when it is)."""
    if setting == "off":
        return None, ""
    why = ""
    if setting == "spin":
        if drv is None or not drv.ok:
            why = f"no driver API ({drv.error if drv is not None else 'none'})"
        else:
            try:
                return SpinHold(drv, limit_s), ""
            except DriverError as e:
                why = str(e)[:500]
    if not hasattr(torch.cuda, "_sleep"):
        return None, (f"spin kernel unavailable: {why}; " if why else "") + "torch.cuda._sleep missing: no hold"
    rate_khz = drv.device_attribute(index, CU_DEVICE_ATTRIBUTE_CLOCK_RATE) if drv is not None and drv.ok else None
    hold = SleepHold(float(rate_khz) * 1e3 if rate_khz else DEFAULT_CLOCK_HZ, limit_s)
    return hold, (f"spin kernel unavailable ({why}): sleep instead" if why else "")
