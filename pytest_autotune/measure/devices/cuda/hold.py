"""The head start's hold: what keeps a sample's stream waiting, behind the L2 flush, while the host enqueues the
sample's calls (docs/architecture.md, "The CUDA sample"; the sample's side is :mod:`.head_start`).

``[devices.cuda].head_start = "spin"`` (:class:`SpinHold`): a kernel that spins until the host writes the sample's
number into a flag in pinned host memory mapped into the device -- NVIDIA nvbench's blocking kernel
(``measure_cold``), with two differences:

- **It fills the GPU.** One block of 512 threads per 512 resident threads every SM allows (an H200: 132 SMs x 4):
  while it runs, no block of any other kernel can be resident, so an arm cannot run work on a stream of its own
  while the timed stream is held -- work the events would never see and the host's clock would see only as the
  host's own enqueue time. Thread 0 of block 0 polls the host's flag; thread 0 of every other block polls a word
  in device memory that it sets; the other threads wait at the block's barrier (no issue slots, little power).
  Copy engines stay free (a memcpy on another stream can run during the hold); ``DeviceClockGate`` sees any copy
  still running after the release.
- **It ends by itself** ``head_start_max_s`` after it began. A held stream can deadlock: a call that synchronises
  (``.item()``, ``torch.cuda.synchronize()``, a ``cudaDeviceSynchronize`` in an extension) waits for the GPU while
  the GPU waits for the host, and so does a launch once the stream's queue is full (about 1,000 pending launches).
  The kernel writes, into the mapped page, whether the host released it or it ran out.

The kernel is PTX (below), compiled by the driver's JIT at setup: a timing sandbox runs no compiler (the build
stage is the only place one runs), and one kernel of forty instructions needs no package for it. ``"off"``: no hold
(protocols 1-8; also the fallback where the driver cannot load or launch the kernel -- the sample is then timed
without a hold, still as max(event, enqueue), and ``timing_info`` says why).

Not used, and why: ``cuStreamWaitValue32`` (the stream waits in the GPU's front end for a host-written value) has
no deadline, and leaves every SM free for another stream's work during the hold; a delay kernel
(``torch.cuda._sleep``) is one thread, leaves the SMs free too, and its length is a guess of the host's time.

Everything here lives on the device instance; this module is in the sandbox's tamper snapshot.
"""

from __future__ import annotations

import ctypes
from typing import Any, Optional

from .driver import (
    CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR,
    CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
    Driver,
    DriverError,
)

#: hold(flag, seq, limit_ns, status, go): thread 0 of block 0 spins until ``*flag == seq`` or ``limit_ns`` passed on
#: the GPU's global timer, sets ``*go = seq``, writes status[1] = 1 if it ran out (0 if released) and status[0] =
#: seq last; thread 0 of every other block waits for ``*go == seq`` (or its own deadline), sleeping 0.5 us between
#: looks; every thread then meets its block's barrier and exits. Generic volatile loads: every poll reads anew.
HOLD_PTX = r"""
.version 7.0
.target sm_70
.address_size 64

.visible .entry autotune_hold(
	.param .u64 autotune_hold_flag,
	.param .u32 autotune_hold_seq,
	.param .u64 autotune_hold_limit,
	.param .u64 autotune_hold_status,
	.param .u64 autotune_hold_go
)
.maxntid 512, 1, 1
.maxnreg 32
{
	.reg .pred 	%p<5>;
	.reg .b32 	%r<7>;
	.reg .b64 	%rd<10>;

	ld.param.u64 	%rd1, [autotune_hold_flag];
	ld.param.u32 	%r1, [autotune_hold_seq];
	ld.param.u64 	%rd2, [autotune_hold_limit];
	ld.param.u64 	%rd3, [autotune_hold_status];
	ld.param.u64 	%rd9, [autotune_hold_go];
	mov.u64 	%rd4, %globaltimer;
	add.s64 	%rd5, %rd4, %rd2;
	mov.u32 	%r4, %tid.x;
	setp.ne.s32 	%p3, %r4, 0;
	@%p3 bra 	$L_bar;
	mov.u32 	%r5, %ctaid.x;
	setp.ne.s32 	%p4, %r5, 0;
	@%p4 bra 	$L_wait;
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
	st.volatile.u32 	[%rd9], %r1;
	st.volatile.u32 	[%rd3+4], %r3;
	membar.sys;
	st.volatile.u32 	[%rd3], %r1;
	membar.sys;
	bra.uni 	$L_bar;
$L_wait:
	ld.volatile.u32 	%r6, [%rd9];
	setp.eq.s32 	%p1, %r6, %r1;
	@%p1 bra 	$L_bar;
	mov.u64 	%rd6, %globaltimer;
	setp.lt.u64 	%p2, %rd6, %rd5;
	@!%p2 bra 	$L_bar;
	nanosleep.u32 	500;
	bra.uni 	$L_wait;
$L_bar:
	bar.sync 	0;
	ret;
}
"""
HOLD_KERNEL = "autotune_hold"
#: threads of one block of the hold (its PTX says .maxntid 512): a divisor of every GPU's resident threads per SM
HOLD_THREADS = 512
#: the mapped page: the flag at offset 0, the kernel's status at STATUS_OFFSET (seq u32, expired u32)
PAGE_BYTES = 4096
STATUS_OFFSET = 64
#: the device word the blocks wait on
GO_BYTES = 256


class HoldFailed(RuntimeError):
    """The hold could not be queued (the sample goes on without it)."""


class SpinHold:
    """The hold: see the module docstring. One per sandbox, set up before the tamper snapshot; its page and its
    device word are never handed to anything but the kernel."""

    name = "spin"

    def __init__(self, drv: Driver, limit_s: float, blocks: int) -> None:
        self._drv = drv
        self.limit_ns = int(limit_s * 1e9)
        self.blocks = blocks
        self.module, self.function = drv.load_function(HOLD_PTX, HOLD_KERNEL)
        self.go = drv.device_alloc(GO_BYTES)
        self.host, self.dev = drv.host_alloc(PAGE_BYTES)
        ctypes.memset(self.host, 0, PAGE_BYTES)
        self._seq = 0

    def fingerprint(self) -> tuple:
        """What must not change while a candidate is loaded (compared by value in the tamper snapshot)."""
        return (self.name, self.limit_ns, self.blocks, self.module, self.function, self.host, self.dev, self.go)

    def begin(self, stream: int) -> int:
        """Queue the hold on ``stream``; returns the sample's number, which releases it."""
        self._seq = self._seq % 0x7FFFFFFF + 1
        args = [ctypes.c_uint64(self.dev), ctypes.c_uint32(self._seq), ctypes.c_uint64(self.limit_ns),
                ctypes.c_uint64(self.dev + STATUS_OFFSET), ctypes.c_uint64(self.go)]
        rc = self._drv.launch(self.function, stream, args, self.blocks, HOLD_THREADS)
        if rc != 0:
            raise HoldFailed(f"cuLaunchKernel of the hold failed with CUresult {rc}")
        return self._seq

    def release(self, token: int) -> None:
        ctypes.c_uint32.from_address(self.host).value = token

    def expired(self, token: int) -> Optional[bool]:
        """After the sample's synchronisation: did the hold run out before the host released it? ``None`` if the
        kernel did not report this sample."""
        status = (ctypes.c_uint32 * 2).from_address(self.host + STATUS_OFFSET)
        return bool(status[1]) if status[0] == token else None


def hold_blocks(drv: Driver, index: int) -> int:
    """Blocks of HOLD_THREADS that fill every SM of device ``index``: SMs x resident threads per SM / HOLD_THREADS."""
    sms = drv.device_attribute(index, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT) or 0
    per_sm = drv.device_attribute(index, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR) or 0
    if sms <= 0 or per_sm < HOLD_THREADS:
        raise DriverError(f"the device reports {sms} SMs of {per_sm} resident threads: the hold cannot fill it")
    return sms * (per_sm // HOLD_THREADS)


def make_hold(setting: str, drv: Optional[Driver], index: int, limit_s: float) -> tuple[Any, str]:
    """The hold ``setting`` asks for: (hold, "") or, where this machine cannot set it up, (None, why)."""
    if setting == "off":
        return None, ""
    if drv is None or not drv.ok:
        return None, f"no hold: no driver API ({drv.error if drv is not None else 'none'})"
    try:
        return SpinHold(drv, limit_s, hold_blocks(drv, index)), ""
    except (DriverError, OSError, ValueError, TypeError, ctypes.ArgumentError) as e:  # never a device that won't start
        return None, f"no hold: {type(e).__name__}: {str(e)[:500]}"
