"""The timed-outputs gate: what the candidate returned while it was timed must be what it gave the correctness gate.

Every candidate output of every timed round is kept in its sandbox until the controller, after the round, draws
fresh positions and asks for a fingerprint (float64 sums and the values at those positions, computed where the
output lives). After timing, the controller picks ``[integrity].verify_rounds`` rounds at random and compares
their fingerprints with golden outputs it computes itself (on the device). A candidate that computes honestly only
while it is checked, replays a stale answer, or leaves its real work to whatever reads the output later, fails here.
"""

from __future__ import annotations

import itertools
import secrets
from typing import Optional

from .base import Gate, GateContext, GateOutcome
from .compare import as_list, check_fingerprint


class TimedOutputsGate(Gate):
    name = "timed-outputs"
    stages = ("integrity",)
    needs_timing = True

    def check(self, ctx: GateContext, stage: str) -> Optional[GateOutcome]:
        ev = ctx.timing
        if ev is None or not ev.rounds:
            return None
        n = min(ctx.protocol.integrity.verify_rounds, len(ev.rounds))
        rng = secrets.SystemRandom()
        chosen = sorted(rng.sample(range(len(ev.rounds)), n))
        ctx.evidence.verified_rounds = chosen
        for ri in chosen:
            r = ev.rounds[ri]
            n_calls = int(r.recipes_p1["count"]) + int(r.recipes_p2["count"])
            if len(r.prints) != n_calls:
                return GateOutcome.refuse(
                    "integrity", f"round {ri}: {len(r.prints)} timed outputs reported for {n_calls} calls")
            # B(p1) ran on p1's sets, B(p2) on p2's, and their outputs were kept in that order; golden outputs one
            # set at a time (at published sizes a set is GBs, and both timing sandboxes still hold theirs)
            goldens = itertools.chain(ctx.golden.iter_stream(r.recipes_p1),  # type: ignore[attr-defined]
                                      ctx.golden.iter_stream(r.recipes_p2))  # type: ignore[attr-defined]
            for ci, (gold, fp) in enumerate(zip(goldens, r.prints)):
                golden = as_list(gold)
                if len(fp) != len(golden):
                    return GateOutcome.refuse("integrity", f"round {ri}, call {ci}: output structure changed")
                for g, f in zip(golden, fp):
                    problem = check_fingerprint(f, g, ctx.protocol)
                    if problem:
                        return GateOutcome.refuse(
                            "integrity", f"timed round {ri}, candidate call {ci}: {problem} (the candidate's "
                            "outputs while timed are not the ones it gave the correctness gate)")
        return None
