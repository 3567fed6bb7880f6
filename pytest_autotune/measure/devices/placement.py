"""Fresh buffer placements every round, inside one sandbox process (``[devices.cpu].placement_span_kib``; docs/design/protocol.md#fresh-placements).

With ``[sandbox].malloc = "reuse"`` glibc hands a process the same heap addresses round after round: a round frees
its inputs and outputs and the next one gets the same blocks back, on the same physical pages, at the same
offsets from each other. Whatever that placement costs (cache sets of a physically indexed cache, 4 KiB aliasing of
a call's loads against its stores) is then frozen into the process for its whole life: an offset that only more
processes average out (docs/results/cpu.md). Stabilizer (Curtsinger & Berger 2013) turns such layout effects into
noise within one run by moving things while it runs; this does the same for a timed arm's data.

Each round, before its inputs are built, the sandbox holds a *spacer* of a random size (the span plus whole pages
and a random cache line, below twice the span) and a second one after the inputs and before the round's samples,
so the inputs start on other pages, and the outputs and temporaries of its calls at other offsets from them (their
own block can repeat: glibc's best fit may hand them the same free block while the inputs moved elsewhere). The
inputs' own block can repeat too: best fit may put them back into a hole an earlier round left, whatever the spacer
(over nine rounds, three distinct input addresses in a fifth of processes, measured 2026-12-05); the round's layout,
inputs against outputs, was new every round in 40 runs of tests/test_cpu_placement.py's script. Both spacers are freed when the round is released. The sizes come from the round's input seeds, drawn afresh
by the controller for every round, the same in both arms' sandboxes (their heaps differ by their own histories).

Allocation and page faults stay out of the samples: the spacers are allocated before the samples, and before a
round every page of the heap, and a margin past what it holds, is written once (``prefault``),
so that a buffer pushed past the old top lands on pages already mapped. That lowers the faults inside samples but
does not end them: a round whose fragmentation needs more than the margin grows the heap onto fresh pages (measured
outside the harness: 0-794 faults over nine rounds of 16 x 1 MiB, against 2,561-3,585 with fixed placements). glibc keeps freed heap mapped under
"reuse" (``MALLOC_TRIM_THRESHOLD_`` 1 GiB), so that happens before the first round (which is never counted) and
again only after a round that grew the heap. Blocks of 32 MiB and more are mapped afresh by glibc every time under
either setting, spacer or not. The sandbox reports the page faults inside each sample (``page_faults_in_samples``).

Like everything in the sandbox, this runs in the candidate's process, which can undo it; what it can gain there is
a placement of its own data, which its own code could choose anyway. The controller's books do not depend on it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import random
from typing import Any, Optional

import torch

PAGE = 4096
LINE = 64
#: a prefault chunk stays under glibc's mmap threshold of "reuse" (32 MiB), so it comes from the heap it grows
CHUNK = 16 << 20


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]


def _mallinfo2() -> Optional[Any]:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        fn = libc.mallinfo2
    except (OSError, AttributeError):  # not glibc >= 2.33
        return None
    fn.restype = _MallInfo2
    return fn


class Placement:
    """The spacers of one sandbox process (span 0: off, nothing is allocated)."""

    def __init__(self, span_bytes: int) -> None:
        self.span = max(0, int(span_bytes)) // PAGE * PAGE
        self._held: list[torch.Tensor] = []
        self._rng: Optional[random.Random] = None
        self._faulted = 0  # the heap's size when every page of it had been written (0: not yet)
        self._in_use_before = 0  # bytes in use when the round began (glibc's uordblks)
        self._round_inputs = 0  # the largest round's inputs and first spacer so far, in bytes
        self._mallinfo = _mallinfo2() if self.span else None
        self.rounds = 0
        self.prefaulted_bytes = 0

    @property
    def enabled(self) -> bool:
        return self.span > 0

    def _spacer(self) -> None:
        assert self._rng is not None
        # at least the span: a smaller block would fill whichever small free hole glibc's best fit finds and move
        # nothing (measured: outputs landed on the same address round after round)
        n = self.span + self._rng.randrange(self.span // PAGE) * PAGE + self._rng.randrange(PAGE // LINE) * LINE
        if n:
            t = torch.empty(n, dtype=torch.uint8)
            t[::PAGE] = 0  # its own pages mapped now, not by whatever lands next to it inside a sample
            self._held.append(t)

    def _heap(self) -> Optional[tuple[int, int]]:
        """``(arena, keepcost)``: the main heap's size, and its top chunk (the part past every allocation)."""
        info = self._mallinfo() if self._mallinfo else None
        return (int(info.arena), int(info.keepcost)) if info is not None else None

    def _in_use(self) -> int:
        info = self._mallinfo() if self._mallinfo else None
        return int(info.uordblks) if info is not None else 0

    def prefault(self) -> None:
        """Before a round: every page of the heap, and a margin past what it holds (both spacers at their largest,
        twice the largest round's inputs, one chunk), written once -- unless the heap has not grown since that was
        last done. Allocated in chunks under
        glibc's mmap threshold, so they come from the heap: first the margin (which may extend the heap, by glibc's
        top pad too), then whatever is left of the top chunk, so the pad's pages are written as well; then freed."""
        heap = self._heap()
        if self._faulted and (heap is None or heap[0] <= self._faulted):
            return
        chunks: list[torch.Tensor] = []

        def take(n: int) -> None:
            c = torch.empty(n, dtype=torch.uint8)
            c[::PAGE] = 0
            chunks.append(c)

        # both spacers at their largest, and twice the largest round's inputs: a round's outputs are about as large
        # as its inputs, and spacers of other sizes leave holes the next round's blocks do not fit (measured on
        # 14_hardswish's rounds of 2 x 7 sets of 4 MiB: the heap grew in steps over the first rounds, and each
        # step's fresh pages were faulted in inside samples, ~24,000 faults in one item with a margin of one chunk)
        left = 4 * self.span + CHUNK + 2 * self._round_inputs
        while left > 0:
            take(min(CHUNK, left))
            left -= chunks[-1].numel()
        for _ in range(64):  # the rest of the top chunk, never past it (that would grow the heap again)
            heap = self._heap()
            if heap is None or heap[1] <= (256 << 10):
                break
            take(min(CHUNK, heap[1] - (128 << 10)))
        heap = self._heap()
        self.prefaulted_bytes += sum(c.numel() for c in chunks)
        chunks.clear()
        self._faulted = heap[0] if heap is not None else 1

    def before_inputs(self, seed: int) -> None:
        """A round begins: the heap is grown if it must be, then the first spacer."""
        if not self.enabled:
            return
        if self._rng is None:  # a half-round's second group (measure/schedule.py) keeps the round's spacers
            self.prefault()
            self._rng = random.Random(seed)
            self._in_use_before = self._in_use()
        self._spacer()

    def after_inputs(self) -> None:
        """The round's inputs exist: the second spacer, between them and what the round's calls allocate."""
        if self.enabled and self._rng is not None:
            self._round_inputs = max(self._round_inputs, self._in_use() - self._in_use_before)
            self._spacer()

    def end_round(self) -> None:
        """The round's inputs and outputs are released: its spacers go too."""
        if not self.enabled:
            return
        self._held = []
        self._rng = None
        self.rounds += 1

    def info(self) -> dict[str, Any]:
        return {"span_bytes": self.span, "rounds": self.rounds, "prefaulted_bytes": self.prefaulted_bytes,
                "heap_bytes": self._faulted}
