"""The timed-outputs gate: what the candidate returned while it was timed must be what it gave the correctness gate.

Every candidate output of every timed round is kept in its sandbox until the controller, after the round, draws
fresh positions and asks for a fingerprint (float64 sums and the values at those positions, computed where the
output lives): of every output, or, on the CPU under ``[devices.cpu].prints_per_group``, of that many calls of
each group, which the controller also chooses only after the round. After timing, the controller picks
``[integrity].verify_rounds`` rounds (``[devices.cpu].verify_rounds`` on the CPU) at random and compares their
fingerprints with golden outputs it computes itself (on the device). A candidate that computes honestly only
while it is checked, replays a stale answer, or leaves its real work to whatever reads the output later, fails here.
"""

from __future__ import annotations

import itertools
import secrets
from typing import Any, Optional

from .base import Gate, GateContext, GateOutcome
from .compare import as_list, check_fingerprint
from .correctness import timed_outputs_floor

#: what an exhausted stream of golden outputs gives
_NO_GOLDEN = object()


class TimedOutputsGate(Gate):
    name = "timed-outputs"
    stages = ("integrity",)
    needs_timing = True

    def check(self, ctx: GateContext, stage: str) -> Optional[GateOutcome]:
        ev = ctx.timing
        if ev is None or not ev.rounds:
            return None
        n = min(ctx.protocol.verify_rounds(ctx.device.name), len(ev.rounds))
        rng = secrets.SystemRandom()
        chosen = sorted(rng.sample(range(len(ev.rounds)), n))
        ctx.evidence.verified_rounds = chosen
        for ri in chosen:
            r = ev.rounds[ri]
            k1 = int(r.recipes_p1["count"])
            n_calls = k1 + int(r.recipes_p2["count"])
            calls = list(range(n_calls)) if r.print_calls is None else list(r.print_calls)
            if len(r.prints) != len(calls):
                return GateOutcome.refuse(
                    "integrity", f"round {ri}: {len(r.prints)} timed outputs reported for {len(calls)} calls")
            # B(p1) ran on p1's sets, B(p2) on p2's, and their outputs were kept in that order; golden outputs one
            # set at a time (at published sizes a set is GBs, and both timing sandboxes still hold theirs), of the
            # calls whose outputs were fingerprinted
            only1 = None if r.print_calls is None else [c for c in calls if c < k1]
            only2 = None if r.print_calls is None else [c - k1 for c in calls if c >= k1]
            golden: Any = ctx.golden
            streams = [golden.iter_stream(r.recipes_p1, only=only1), golden.iter_stream(r.recipes_p2, only=only2)]
            try:
                problem = self._check_round(ctx, ri, itertools.chain(*streams), r.prints, calls)
            finally:  # a stream left suspended holds its current input set and output until it is closed
                for stream in streams:
                    stream.close()
            if problem:
                return problem
        return None

    def _check_round(self, ctx: GateContext, ri: int, goldens, prints: list, calls: list) -> Optional[GateOutcome]:
        """Each call's fingerprint against its golden output, one golden alive at a time: the next is computed
        (its input set built, the reference run) only once this one is dropped. A ``for`` over ``zip`` would
        still hold this golden while the next was made -- an output more than the memory plan counts (its
        timing need: the controller verifying one set): at KernelBench's 36_RMSNorm_ sizes 7 GiB, and the
        controller ran out of an 80 GB H100's memory there (2026-12-06)."""
        floor = timed_outputs_floor(ctx)
        for ci, fp in zip(calls, prints):
            gold = next(goldens, _NO_GOLDEN)
            if gold is _NO_GOLDEN:  # as zip would: the streams make one golden for each fingerprinted call
                break
            outcome = _check_call(ctx, ri, ci, as_list(gold), fp, floor)
            del gold  # before the next golden is made
            if outcome is not None:
                return outcome
        return None


def _check_call(ctx: GateContext, ri: int, ci: int, golden: list, fp: list, floor: float) -> Optional[GateOutcome]:
    if len(fp) != len(golden):
        return GateOutcome.refuse("integrity", f"round {ri}, call {ci}: output structure changed")
    for g, f in zip(golden, fp):
        problem = check_fingerprint(f, g, ctx.protocol, floor)
        if problem:
            return GateOutcome.refuse(
                "integrity", f"timed round {ri}, candidate call {ci}: {problem} (the candidate's "
                "outputs while timed are not the ones it gave the correctness gate)")
    return None
