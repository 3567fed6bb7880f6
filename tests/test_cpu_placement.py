"""Fresh placements for a CPU timing round's data (measure/devices/placement.py, issue 28): with the protocol's
"reuse" malloc settings, a round's inputs and outputs move from round to round, and no page fault lands in the
calls of a round after the first (the heap is written before the round starts)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

from pytest_autotune.sandbox.jail_session import MALLOC_REUSE_ENV

ROUNDS = """
import json, resource, sys, torch
from pytest_autotune.measure.devices.placement import Placement
torch.set_num_threads(1)
p = Placement(int(sys.argv[1]) << 10)
keep, rows = [], []
faults = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for rnd in range(10):
    p.before_inputs(1000 + rnd)
    xs = [torch.randn(16, 16384) for _ in range(8)]
    p.after_inputs()
    f0 = faults()
    outs = [torch.softmax(x, 1) for x in xs]
    f1 = faults()
    keep.append(torch.empty(100))  # a small block that outlives the round, as the harness's own do
    rows.append({"x": xs[0].data_ptr(), "out": outs[0].data_ptr(), "faults": f1 - f0})
    del xs, outs
    p.end_round()
print(json.dumps({"rows": rows, "info": p.info()}))
"""


def _rounds(span_kib: int) -> dict:
    env = {**os.environ, **MALLOC_REUSE_ENV}
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(ROUNDS), str(span_kib)], env=env, check=True,
                         capture_output=True, text=True, timeout=120).stdout
    return json.loads(out.strip().splitlines()[-1])


def test_placements_move_between_rounds_and_no_fault_lands_in_the_calls():
    got = _rounds(1024)
    rows = got["rows"][1:]  # the first round is the warm-up round, never counted
    assert len({r["x"] for r in rows}) >= 3, rows
    assert len({r["out"] for r in rows}) >= 3, rows
    assert len({(r["out"] - r["x"]) % 4096 for r in rows}) >= 3, rows  # the outputs' offset from the inputs too
    # (a page of libtorch's code evicted under memory pressure may fault back in: a few, never one per round)
    assert sum(r["faults"] for r in rows) <= 3, rows
    assert got["info"]["span_bytes"] == 1 << 20 and got["info"]["rounds"] == 10
    assert got["info"]["prefaulted_bytes"] >= 4 << 20


def test_span_zero_allocates_nothing():
    got = _rounds(0)
    assert got["info"] == {"span_bytes": 0, "rounds": 0, "prefaulted_bytes": 0, "heap_bytes": 0}
