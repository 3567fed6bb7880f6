"""A simulated CUDA runtime for the CUDA device's CPU-side tests (tests/test_cuda_head_start.py).

A fake host clock and a fake GPU: every call the timing code makes (events, synchronisations, the hold's kernel
through a fake driver) is logged in host order and queued on a stream; the GPU's timeline
is worked out when the host synchronises or reads an event: on each stream one operation after another, none
before the host queued it plus a launch latency, a hold until the host wrote its number into the flag (polled at
every fake call, as the spin kernel polls host memory) or until its deadline -- and while it holds, no kernel of
any stream starts (it fills every SM) --, a stream wait until the other stream's work is done, and at most
``queue_cap`` operations waiting on a stream (the host blocks beyond that).
Nothing here runs on a GPU; the numbers are the test's own.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Callable, Optional

US = 1e-6


@dataclass
class Op:
    kind: str  # "kernel" | "event" | "hold" | "wait"
    stream: int
    enq_ns: int
    dur_ns: int = 0
    label: str = ""
    event: Any = None
    hold: Optional[dict] = None  # {"flag": addr, "seq": int, "limit_ns": int, "status": addr, "release_ns": ...}
    dep: Optional["Op"] = None
    start_ns: int = 0
    end_ns: int = 0


@dataclass
class FakeGPU:
    launch_latency_ns: int = 5_000
    sync_cost_ns: int = 10_000
    record_cost_ns: int = 2_000
    queue_cap: int = 1024
    hold_fills_sms: bool = True  # False: a hold of one thread (nvbench's), beside which other streams run
    now_ns: int = 1_000_000_000
    ops: list = field(default_factory=list)
    log: list = field(default_factory=list)
    current: int = 1
    next_stream: int = 2
    syncs: int = 0
    _buffers: list = field(default_factory=list)
    unreleased: list = field(default_factory=list)
    done: list = field(default_factory=list)  # operations finished by a synchronisation (times final)
    base_tail: dict = field(default_factory=dict)

    # ---- host side
    def advance(self, seconds: float) -> None:
        self._poll()
        self.now_ns += int(seconds * 1e9)

    def perf_counter_ns(self) -> int:
        self._poll()
        return self.now_ns

    def enqueue(self, op: Op) -> Op:
        self._poll()
        queued = sum(1 for o in self.ops if o.stream == op.stream) >= self.queue_cap
        pending = [o for o in self._resolved() if o.stream == op.stream and o.start_ns > self.now_ns] if queued else []
        if len(pending) >= self.queue_cap:  # a full launch queue: the host waits for the GPU to take one
            self.now_ns = max(self.now_ns, pending[len(pending) - self.queue_cap].start_ns)
            self.log.append("queue full")
        op.enq_ns = self.now_ns
        self.ops.append(op)
        if op.hold is not None and op.hold.get("flag"):
            self.unreleased.append(op.hold)
        self.log.append(f"{op.kind} {op.label}".strip())
        return op

    def kernel(self, gpu_s: float, label: str = "", stream: Optional[int] = None, host_s: float = 0.0) -> Op:
        self.advance(host_s)
        return self.enqueue(Op("kernel", self.current if stream is None else stream, 0, int(gpu_s * 1e9), label))

    def synchronize(self, *_: Any) -> None:
        self._poll()
        self.log.append("synchronize")
        ends = [o.end_ns for o in self._resolved()]
        self.now_ns = max([self.now_ns] + ends) + self.sync_cost_ns
        self.syncs += 1
        self._write_status()
        for o in self.ops:  # all done: their times are final
            self.base_tail[o.stream] = max(self.base_tail.get(o.stream, 0), o.end_ns)
        self.done += self.ops
        self.ops = []

    def wait_stream(self, waiter: int, other: int) -> None:
        last = next((o for o in reversed(self.done + self.ops) if o.stream == other), None)
        self.enqueue(Op("wait", waiter, 0, 0, f"{waiter}<-{other}", dep=last))

    # ---- the hold's flag, in real host memory the code under test writes with ctypes
    def buffer(self, nbytes: int) -> int:
        buf = ctypes.create_string_buffer(nbytes)
        self._buffers.append(buf)
        return ctypes.addressof(buf)

    def _poll(self) -> None:
        for h in self.unreleased:
            if ctypes.c_uint32.from_address(h["flag"]).value == h["seq"]:
                h["release_ns"] = self.now_ns
                self.log.append("release")
        self.unreleased = [h for h in self.unreleased if h.get("release_ns") is None]

    def _write_status(self) -> None:
        for o in self._resolved():
            h = o.hold
            if h is not None and h.get("status") and o.end_ns <= self.now_ns:
                st = h["status"]
                expired = h.get("release_ns") is None or o.end_ns - o.start_ns >= h["limit_ns"]
                ctypes.c_uint32.from_address(st + 4).value = int(expired)
                ctypes.c_uint64.from_address(st + 8).value = o.end_ns - o.start_ns
                ctypes.c_uint32.from_address(st).value = h["seq"]

    # ---- the GPU's timeline
    def _resolved(self) -> list:
        tail: dict[int, int] = dict(self.base_tail)
        holds: list = []
        for o in self.ops:
            start = max(tail.get(o.stream, 0), o.enq_ns + (self.launch_latency_ns if o.kind != "wait" else 0))
            if o.kind == "wait" and o.dep is not None:
                start = max(start, o.dep.end_ns)
            if o.kind == "kernel" and self.hold_fills_sms:  # no block of another kernel is resident meanwhile
                for h in holds:
                    if h.start_ns <= start < h.end_ns:
                        start = h.end_ns
            o.start_ns = start
            if o.kind == "hold":
                holds.append(o)
                h = o.hold or {}
                rel = h.get("release_ns")
                cap = start + h["limit_ns"]
                o.end_ns = cap if rel is None else min(cap, max(start, rel + self.launch_latency_ns))
            else:
                o.end_ns = start + o.dur_ns
            tail[o.stream] = o.end_ns
        return self.ops

    def first(self, label: str) -> Op:
        self._resolved()
        return next(o for o in self.done + self.ops if o.label == label)

    def all_ops(self) -> list:
        self._resolved()
        return self.done + self.ops


class FakeEvent:
    def __init__(self, gpu: FakeGPU, enable_timing: bool = True, external: bool = False) -> None:
        self.gpu = gpu
        self.op: Optional[Op] = None

    def record(self, stream: Any = None) -> None:
        self.gpu.advance(self.gpu.record_cost_ns * 1e-9)
        handle = self.gpu.current if stream is None else stream.cuda_stream
        self.op = self.gpu.enqueue(Op("event", handle, 0, 0, "", event=self))

    def elapsed_time(self, other: "FakeEvent") -> float:
        if self.op is None or other.op is None:
            raise RuntimeError("event not recorded")
        self.gpu._resolved()
        return (other.op.start_ns - self.op.start_ns) * 1e-6  # milliseconds, as torch


class FakeStream:
    def __init__(self, gpu: FakeGPU, handle: Optional[int] = None) -> None:
        self.gpu = gpu
        if handle is None:
            handle, gpu.next_stream = gpu.next_stream, gpu.next_stream + 1
        self.cuda_stream = handle

    def wait_stream(self, other: "FakeStream") -> None:
        self.gpu.wait_stream(self.cuda_stream, other.cuda_stream)


class _StreamContext:
    def __init__(self, gpu: FakeGPU, stream: FakeStream) -> None:
        self.gpu, self.stream, self.prev = gpu, stream, gpu.current

    def __enter__(self) -> FakeStream:
        self.gpu.current = self.stream.cuda_stream
        return self.stream

    def __exit__(self, *a: Any) -> None:
        self.gpu.current = self.prev


def fake_torch(gpu: FakeGPU) -> SimpleNamespace:
    """The part of ``torch`` the timing code calls, on the fake GPU."""
    cuda = SimpleNamespace(
        Event=lambda enable_timing=True, external=False: FakeEvent(gpu, enable_timing, external),
        synchronize=gpu.synchronize,
        current_stream=lambda index=None: FakeStream(gpu, gpu.current),
        Stream=lambda device=None: FakeStream(gpu),
        stream=lambda s: _StreamContext(gpu, s),
    )
    return SimpleNamespace(cuda=cuda)


class FakeDriver:
    """The driver API the spin hold uses, on the fake GPU (``rc``: what cuLaunchKernel returns)."""

    def __init__(self, gpu: FakeGPU, ptx_error: Optional[str] = None, rc: int = 0) -> None:
        self.gpu, self.ptx_error, self.rc = gpu, ptx_error, rc
        self.ok, self.error, self.kernel_error, self.lib = True, None, "", object()
        self.launches: list = []
        self.loaded: list = []

    def load_function(self, ptx: str, name: str) -> tuple[int, int]:
        from pytest_autotune.measure.devices.cuda.driver import DriverError

        if self.ptx_error:
            raise DriverError(f"cuModuleLoadDataEx failed with CUresult 218: {self.ptx_error}")
        self.loaded.append((ptx, name))
        return 0x1000, 0x2000

    def host_alloc(self, nbytes: int) -> tuple[int, int]:
        addr = self.gpu.buffer(nbytes)
        return addr, addr  # unified addressing: the device sees the page at the host's address

    def host_free(self, host: int) -> None:
        return None

    def device_alloc(self, nbytes: int) -> int:
        return self.gpu.buffer(nbytes)

    def launch(self, function: int, stream: int, args: list, blocks: int = 1, threads: int = 1) -> int:
        self.launches.append((function, stream, [a.value for a in args], blocks, threads))
        if self.rc:
            return self.rc
        flag, seq, limit_ns, status, _go = (a.value for a in args)
        self.gpu.advance(5 * US)
        self.gpu.enqueue(Op("hold", stream, 0, 0, "spin hold",
                            hold={"flag": flag, "seq": seq, "limit_ns": limit_ns, "status": status}))
        return 0

    def device_attribute(self, ordinal: int, attr: int) -> Optional[int]:
        return {16: 132, 39: 2048}.get(attr)  # an H200: SMs, resident threads per SM


def arm(gpu: FakeGPU, host_s: float, gpu_s: float, launches: int = 1, first_extra_s: float = 0.0,
        label: str = "call") -> Callable[..., Any]:
    """A call that spends ``host_s`` on the host and ``gpu_s`` on the GPU in ``launches`` launches; the first call
    after each synchronisation pays ``first_extra_s`` more on the host before its first launch (a compiled module's
    guards and launcher on a cold path)."""
    seen = {"syncs": -1}

    def call(*_: Any) -> str:
        if seen["syncs"] != gpu.syncs:
            seen["syncs"] = gpu.syncs
            gpu.advance(first_extra_s)
        for i in range(launches):
            gpu.kernel(gpu_s / launches, f"{label} {i}", host_s=host_s / launches)
        return label

    return call
