"""Which physical pages two sibling processes share (docs/design/protocol.md#the-per-process-offset):
the code they run, or also the pages their data is on? Needs root (``/proc/PID/pagemap`` shows frame numbers only to
CAP_SYS_ADMIN).

Two processes are forked from one parent after it imported torch and ran the op once, as the harness's zygote forks
both sandboxes of a pair (``cpu_sibling_offsets.py`` does the same). Each allocates its own inputs and outputs
(16 x 16384 floats, four of each, as there) and runs the op on them. The parent then reads both siblings' page maps:

* code: every resident page of each executable mapping of libtorch_cpu and of the interpreter;
* data: every resident page of the siblings' tensors (their addresses, sent by each sibling).

It prints, for each, how many pages both siblings have resident and on how many of those their frame is the same.
Same frames for the code (at the same virtual addresses: the layout is the fork's) and other frames for the data
mean that where the code lies cannot set one sibling apart from the other; where its own pages lie can.

    sudo python3 benchmarks/harness/sibling_pages.py
"""

from __future__ import annotations

import os
import struct
import sys

from cpu_sibling_offsets import fork_with_pipes  # this script's folder is on sys.path when run

PAGE = os.sysconf("SC_PAGE_SIZE")


def frames(pid: int, start: int, end: int) -> dict[int, int]:
    """virtual page -> frame number of the resident pages of [start, end) in ``pid``."""
    out: dict[int, int] = {}
    with open(f"/proc/{pid}/pagemap", "rb") as f:
        f.seek(start // PAGE * 8)
        raw = f.read((end - start) // PAGE * 8)
    for i in range(len(raw) // 8):
        (v,) = struct.unpack_from("<Q", raw, i * 8)
        if v >> 63 & 1:
            out[start + i * PAGE] = v & ((1 << 55) - 1)
    return out


def code_ranges(pid: int) -> list[tuple[int, int, str]]:
    out = []
    with open(f"/proc/{pid}/maps") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 6 and "x" in parts[1] and ("libtorch_cpu" in parts[5] or "python" in parts[5]):
                a, b = (int(x, 16) for x in parts[0].split("-"))
                out.append((a, b, os.path.basename(parts[5])))
    return out


def compare(a: dict[int, int], b: dict[int, int]) -> tuple[int, int]:
    both = set(a) & set(b)
    return len(both), sum(1 for v in both if a[v] == b[v])


def main() -> int:
    import torch

    torch.set_num_threads(1)
    x = torch.randn(16, 16384)
    torch.nn.functional.gelu(x)  # the op's code paged in by the parent, as the zygote's warm-up does
    def sibling(go_r: int, w: int) -> None:
        xs = [torch.randn(16, 16384) for _ in range(4)]
        outs = [torch.empty(16, 16384) for _ in range(4)]
        for a, o in zip(xs, outs):
            torch.nn.functional.gelu(a, out=o)
        spans = [(t.data_ptr(), t.data_ptr() + t.numel() * t.element_size()) for t in xs + outs]
        os.write(w, repr(spans).encode())
        os.close(w)
        os.read(go_r, 1)  # until the parent has read both page maps

    kids = []
    for _ in range(2):
        pid, go_w, r = fork_with_pipes(sibling)
        spans = eval(os.read(r, 1 << 16).decode())  # noqa: S307 - our own child's repr of a list of int pairs
        kids.append((pid, spans, go_w))
    (pa, sa, _), (pb, sb, _) = kids
    rows = []
    for (start, end, name) in code_ranges(pa):
        n, same = compare(frames(pa, start, end), frames(pb, start, end))
        rows.append((f"code {name} {start:#x}", n, same))
    fa: dict[int, int] = {}
    fb: dict[int, int] = {}
    for s, e in sa:
        fa.update(frames(pa, s // PAGE * PAGE, -(-e // PAGE) * PAGE))
    for s, e in sb:
        fb.update(frames(pb, s // PAGE * PAGE, -(-e // PAGE) * PAGE))
    shared = set(fa.values()) & set(fb.values())
    data_row = (f"data (the siblings' own tensors): {len(fa)} and {len(fb)} pages resident, "
                f"{len(shared)} frame(s) in common")
    for _, _, go in kids:
        os.write(go, b"x")
    for pid, _, _ in kids:
        os.waitpid(pid, 0)
    if not any(n for _, n, _ in rows) or not fa:
        print("no frame numbers readable (run as root)", file=sys.stderr)
        return 2
    for label, n, same in rows:
        if n:
            print(f"{label}: {n} pages resident in both, {same} on the same frame")
    total, same = sum(n for _, n, _ in rows), sum(m for _, _, m in rows)
    print(f"code, all mappings: {total} pages resident in both siblings at the same address, {same} on the same frame")
    print(data_row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
