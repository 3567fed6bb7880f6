"""The per-process offset without the harness (docs/design/protocol.md#derived-input-sets and "Where the
per-process offset lives"): two processes forked from one parent after it imported torch (as the harness's zygote
forks both sandboxes of a pair: the same code layout), each with buffers of its own, take turns timing one op at
millisecond spacing in ABBA/BAAB rounds, both pinned to one CPU with the parent on another. The median log(A/B) of a
pair of siblings is its offset; a fresh pair is forked for each line.

    python3 benchmarks/harness/cpu_sibling_offsets.py --op gelu --pairs 8 --rounds 400
    python3 benchmarks/harness/cpu_sibling_offsets.py --op relu --no-thp
    python3 benchmarks/harness/cpu_sibling_offsets.py --pairs 12 --modes self,own,shared-all,worker:40

With no offset of the process, the pairs' ratios would spread only by their sampling noise (a few tenths of a per
cent over 400 rounds); they spread by several per cent, most for GELU.

``--modes`` runs every pair of siblings once in each mode, in rotating order (a sitting's noise shared by all modes).
What each sibling does, and what that moves:

* ``own``: 4 input and 4 output buffers of its own (16 x 16384 floats), one 4 MiB flush buffer written before each
  sample (``--flush``);
* ``self``: one process serves both arms (the control: no second process);
* ``shared`` / ``shared-all``: the inputs and outputs (and the flush buffer) in shared memory the parent made, the
  same physical pages in both siblings;
* ``small``: 16 KiB tensors, 64 calls a sample (the data stays in L1);
* ``thp``: data and flush buffer in a 2 MiB-aligned mapping with MADV_HUGEPAGE;
* ``thread-stack:N``: every N samples a new thread with a stack of a new size (glibc cannot reuse a cached one);
* ``remap:N``: every N samples the data moved to a new anonymous mapping;
* ``refork:N``: every N samples the sibling forks its successor and exits at once (a new address space; the pages
  stay where they were, no longer shared with anyone);
* ``hold:N``: every N samples the sibling forks a child that only sleeps, so that its own next writes are copied to
  new pages (the same address space);
* ``worker:N`` / ``worker-shared:N``: every N samples a new worker forked from the sibling, which stays alive: every
  page the worker writes is copied to a page of its own, in a new address space.
"""

from __future__ import annotations

import argparse
import ctypes
import math
import mmap
import os
import signal
import statistics
import struct
import sys
import threading
import time
from typing import Callable

from pytest_autotune.sandbox.jail_session import MALLOC_REUSE_ENV

ENV = MALLOC_REUSE_ENV  # the sandboxes' malloc settings
SHAPE = (16, 16384)
N_BUF = 4


class Bufs:
    """A sibling's inputs, outputs and flush buffer."""

    def __init__(self, xs: list, outs: list, flush) -> None:
        self.xs, self.outs, self.flush = xs, outs, flush


def _own(torch, flush_n: int) -> Bufs:
    return Bufs([torch.randn(*SHAPE) for _ in range(N_BUF)], [torch.empty(*SHAPE) for _ in range(N_BUF)],
                [torch.empty((4 << 20) // 4, dtype=torch.int32) for _ in range(flush_n)])


def _in_mapping(torch, mm, xs_from: list) -> Bufs:
    t = torch.frombuffer(mm, dtype=torch.float32)
    n = SHAPE[0] * SHAPE[1]
    xs = [t[j * n:(j + 1) * n].view(*SHAPE) for j in range(N_BUF)]
    outs = [t[(N_BUF + j) * n:(N_BUF + j + 1) * n].view(*SHAPE) for j in range(N_BUF)]
    for a, b in zip(xs, xs_from):
        a.copy_(b)
    for o in outs:
        o.zero_()
    return Bufs(xs, outs, [t[2 * N_BUF * n:(2 * N_BUF + 1) * n].view(torch.int32)])


def _thp(torch) -> Bufs:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    size = 40 << 20
    p = libc.mmap(None, size + (2 << 20), 3, 0x22, -1, 0)
    base = (p + (2 << 20) - 1) & ~((2 << 20) - 1)
    libc.madvise(base, size, 14)  # MADV_HUGEPAGE
    buf = (ctypes.c_char * size).from_address(base)
    return _in_mapping(torch, buf, [torch.randn(*SHAPE) for _ in range(N_BUF)])


def _serve_one(torch, op: str, b: Bufs, i: int, flush_i: int, reps: int) -> int:
    if b.flush:
        b.flush[flush_i % len(b.flush)].fill_(1)
    x, out = b.xs[i % N_BUF], b.outs[i % N_BUF]
    t0 = time.perf_counter_ns()
    for _ in range(reps):
        if op == "gelu":
            torch.ops.aten.gelu.out(x, out=out)
        else:
            torch.clamp_min(x, 0, out=out)
    return time.perf_counter_ns() - t0


def _child(rfd: int, wfd: int, op: str, cpu: int, no_thp: bool, flush_mode: str, mode: str,
           shared: "Bufs | None") -> None:
    import torch

    os.sched_setaffinity(0, {cpu})
    kind, _, every_s = mode.partition(":")
    every = int(every_s or 40)
    if no_thp and kind != "thp":
        ctypes.CDLL(None).prctl(41, 1, 0, 0, 0)  # PR_SET_THP_DISABLE
    reps = 1
    if kind in ("shared", "worker-shared"):
        b = Bufs(shared.xs, shared.outs, _own(torch, 1).flush)
    elif kind == "shared-all":
        b = shared
    elif kind == "small":
        b = Bufs([torch.randn(4, 1024) for _ in range(N_BUF)], [torch.empty(4, 1024) for _ in range(N_BUF)],
                 _own(torch, 1).flush)
        reps = 64
    elif kind == "thp":
        b = _thp(torch)
    else:
        b = _own(torch, {"rotate": 8, "none": 0}.get(flush_mode, 1))

    def answer(i: int) -> bool:
        req = os.read(rfd, 1)
        if not req or req == b"q":
            return False
        os.write(wfd, struct.pack("q", _serve_one(torch, op, b, i, i, reps)))
        return True

    def warm() -> None:  # a new process's or placement's first writes, outside any sample
        for f in b.flush:
            f.fill_(2)
        for j in range(N_BUF):
            _serve_one(torch, op, b, j, j, 1)

    if kind in ("worker", "worker-shared"):
        while True:
            pid = os.fork()
            if pid == 0:
                warm()
                for i in range(every):
                    if not answer(i):
                        os._exit(3)
                os._exit(0)
            _, status = os.waitpid(pid, 0)
            if os.waitstatus_to_exitcode(status) != 0:
                os._exit(0)
    holder = None
    i = 0
    while True:
        if i and i % every == 0:
            if kind == "refork":
                if os.fork() != 0:
                    os._exit(0)
                warm()
            elif kind == "hold":
                if holder:
                    os.kill(holder, signal.SIGKILL)
                    os.waitpid(holder, 0)
                holder = os.fork()
                if holder == 0:
                    while True:
                        time.sleep(1000)
                warm()
            elif kind == "remap":
                mm = mmap.mmap(-1, (2 * N_BUF + 1) * SHAPE[0] * SHAPE[1] * 4)
                b = _in_mapping(torch, mm, b.xs)
                warm()
            elif kind == "thread-stack":
                threading.stack_size((1 << 20) + 65536 * ((i // every) % 64))
                box: dict = {}

                def run(start: int = i) -> None:
                    box["ok"] = all(answer(start + j) for j in range(every))

                th = threading.Thread(target=run)
                th.start()
                th.join()
                if not box.get("ok"):
                    os._exit(0)
                i += every
                continue
        if not answer(i):
            if holder:
                os.kill(holder, signal.SIGKILL)
            os._exit(0)
        i += 1


def fork_with_pipes(child: Callable[[int, int], object]) -> tuple[int, int, int]:
    """Fork a child with a pipe each way: it runs ``child(from_parent, to_parent)`` and exits (also where ``child``
    returns); the parent gets ``(pid, to_child, from_child)``, the child's ends closed on its side."""
    down_r, down_w = os.pipe()
    up_r, up_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(down_w)
        os.close(up_r)
        child(down_r, up_w)
        os._exit(0)
    os.close(down_r)
    os.close(up_w)
    return pid, down_w, up_r


def _pair(a, torch, mode: str, work: int) -> float:
    shared = None
    if mode.split(":")[0] in ("shared", "shared-all", "worker-shared"):
        shared = Bufs([torch.randn(*SHAPE).share_memory_() for _ in range(N_BUF)],
                      [torch.zeros(*SHAPE).share_memory_() for _ in range(N_BUF)],
                      [torch.zeros((4 << 20) // 4, dtype=torch.int32).share_memory_()])
    kids = [fork_with_pipes(lambda rfd, wfd: _child(rfd, wfd, a.op, work, a.no_thp, a.flush, mode, shared))
            for _ in range(1 if mode == "self" else 2)]
    if mode == "self":
        kids.append(kids[0])
    logs = []
    for r in range(a.rounds):
        order = (0, 1, 1, 0) if r % 2 == 0 else (1, 0, 0, 1)
        t = {0: 0, 1: 0}
        for k in order:
            os.write(kids[k][1], b"x")
            t[k] += struct.unpack("q", os.read(kids[k][2], 8))[0]
        logs.append(math.log(t[0] / t[1]))
    for pid, w, r in kids[:1 if mode == "self" else 2]:
        os.write(w, b"q")
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass
        os.close(w)
        os.close(r)
    time.sleep(0.05)  # a re-forked sibling's successor exits on its own
    sampling = statistics.stdev(logs) * 1.25 / math.sqrt(len(logs))
    return statistics.median(logs[20:]), sampling


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--op", choices=("gelu", "relu"), default="gelu")
    ap.add_argument("--pairs", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=400)
    ap.add_argument("--no-thp", action="store_true", help="PR_SET_THP_DISABLE in both siblings, as the sandboxes")
    ap.add_argument("--flush", choices=("fixed", "rotate", "none"), default="fixed",
                    help="own mode: the 4 MiB written before every sample: one buffer (the harness's), eight in turn, "
                    "or none")
    ap.add_argument("--modes", default="own", help="comma-separated (see above), e.g. own,shared-all,worker:40")
    a = ap.parse_args()
    if any(os.environ.get(k) != v for k, v in ENV.items()):  # the sandboxes' malloc settings, before torch loads
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, **ENV})
    import torch

    torch.set_num_threads(1)
    cpus = sorted(os.sched_getaffinity(0))
    work, mine = cpus[-1], cpus[0]
    os.sched_setaffinity(0, {mine})
    modes = a.modes.split(",")
    res: dict[str, list] = {m: [] for m in modes}
    for p in range(a.pairs):
        for m in modes[p % len(modes):] + modes[:p % len(modes)]:
            res[m].append(_pair(a, torch, m, work))
    for m in modes:
        meds = [x for x, _ in res[m]]
        print(f"{a.op}{' (no THP)' if a.no_thp else ''}, {m}" + (f", flush {a.flush}" if m == "own" else "")
              + ": sibling pairs A/B " + " ".join(f"{math.exp(x):.3f}" for x in meds)
              + f"; sd {statistics.stdev(meds) * 100:.1f}% (log), sampling sd of one pair's median ~"
              f"{statistics.median(s for _, s in res[m]) * 100:.2f}%", flush=True)


if __name__ == "__main__":
    main()
