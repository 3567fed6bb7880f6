"""Fresh buffer placements every round, inside one sandbox process (``[devices.cpu].placement_span_kib``; issue 28).

With ``[sandbox].malloc = "reuse"`` glibc hands a process the same heap addresses round after round: a round frees
its inputs and outputs and the next one gets the same blocks back, on the same physical pages, at the same
offsets from each other. Whatever that placement costs (cache sets of a physically indexed cache, 4 KiB aliasing of
a call's loads against its stores) is then frozen into the process for its whole life: an offset that only more
processes average out (docs/harness.md). Stabilizer (Curtsinger & Berger 2013) turns such layout effects into
noise within one run by moving things while it runs; this does the same for a timed arm's data.

Each round, before its inputs are built, the sandbox holds a *spacer* of a random size (whole pages plus a random
cache line, below the span) and a second one after the inputs and before the round's samples, so the inputs, and
the outputs and temporaries of its calls, start on other pages and at other offsets from each other. Both spacers
are freed when the round is released. The sizes come from the round's input seeds, drawn afresh by the controller
for every round, the same in both arms' sandboxes (their heaps differ by their own histories anyway).

Allocation and page faults stay out of the samples: the spacers are allocated before the samples, and before a
round the heap is grown to what the largest round so far held plus both spacers' span, every page of it written
once (``prefault``), so that a buffer pushed past the old top lands on pages already mapped. glibc keeps freed heap
mapped under "reuse" (``MALLOC_TRIM_THRESHOLD_`` 1 GiB), so that happens once per process, before the first round
(which is never counted) and again only if a round grows. Blocks of 32 MiB and more are mapped afresh by glibc
every time under either setting, spacer or not.
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
        self._heap_high = 0  # the largest main-arena heap seen at a round's end
        self._faulted = 0  # heap bytes written once by prefault
        self._mallinfo = _mallinfo2() if self.span else None
        self.rounds = 0
        self.prefaulted_bytes = 0

    @property
    def enabled(self) -> bool:
        return self.span > 0

    def _spacer(self) -> None:
        assert self._rng is not None
        n = self._rng.randrange(self.span // PAGE) * PAGE + self._rng.randrange(PAGE // LINE) * LINE
        if n:
            t = torch.empty(n, dtype=torch.uint8)
            t[::PAGE] = 0  # its own pages mapped now, not by whatever lands next to it inside a sample
            self._held.append(t)

    def heap_bytes(self) -> int:
        info = self._mallinfo() if self._mallinfo else None
        return int(info.arena) if info is not None else 0

    def prefault(self) -> None:
        """Grow the heap to the largest round so far plus both spacers' span, every page written once."""
        want = self._heap_high + 2 * self.span + CHUNK
        if want <= self._faulted:
            return
        chunks = []
        left = want
        while left > 0:
            c = torch.empty(min(CHUNK, left), dtype=torch.uint8)
            c[::PAGE] = 0
            chunks.append(c)
            left -= c.numel()
        del chunks
        self.prefaulted_bytes += want - self._faulted
        self._faulted = want

    def before_inputs(self, seed: int) -> None:
        """A round begins: the heap is grown if it must be, then the first spacer."""
        if not self.enabled:
            return
        if self._rng is None:  # a half-round's second group (measure/schedule.py) keeps the round's spacers
            self.prefault()
            self._rng = random.Random(seed)
        self._spacer()

    def after_inputs(self) -> None:
        """The round's inputs exist: the second spacer, between them and what the round's calls allocate."""
        if self.enabled and self._rng is not None:
            self._spacer()

    def end_round(self) -> None:
        """The round's outputs are released: how large the heap got, then the spacers go."""
        if not self.enabled:
            return
        self._heap_high = max(self._heap_high, self.heap_bytes())
        self._held = []
        self._rng = None
        self.rounds += 1

    def info(self) -> dict[str, Any]:
        return {"span_bytes": self.span, "rounds": self.rounds, "prefaulted_bytes": self.prefaulted_bytes,
                "heap_high_bytes": self._heap_high}
