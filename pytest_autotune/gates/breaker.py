"""The anomaly breaker: an honest speedup above ``[breaker].max_speedup`` is not believed.

Such a measurement goes to the ``quarantine`` table, never to ``results``, and the item fails with
``QUARANTINED: 61,000x > 10x breaker``. A human who has looked at the candidate can release that exact candidate
digest (``autotune quarantine release ID --reason ...``); the release is recorded, and later runs record the
candidate with ``breaker = 'released:<id>'``.
"""

from __future__ import annotations

from typing import Callable, Optional

from .base import Gate, GateContext, GateOutcome


def format_speedup(x: float) -> str:
    return f"{x:,.0f}x" if x >= 100 else f"{x:.2f}x"


class BreakerGate(Gate):
    name = "breaker"
    stages = ("breaker",)
    needs_timing = True

    def __init__(self, release_lookup: Optional[Callable[[str, str], Optional[int]]] = None) -> None:
        self.release_lookup = release_lookup

    def check(self, ctx: GateContext, stage: str) -> Optional[GateOutcome]:
        m = ctx.measurement
        if m is None:
            return None
        limit = ctx.protocol.breaker.max_speedup
        if m.speedup <= limit:
            return None
        cand_sha = ctx.candidate_sha256 or ""
        release = self.release_lookup(ctx.problem.name, cand_sha) if self.release_lookup else None
        if release is not None:
            ctx.evidence.breaker_release = release
            ctx.warnings.append(f"breaker released for this candidate digest (release {release})")
            return None
        return GateOutcome.quarantine(
            "breaker",
            f"QUARANTINED: {format_speedup(m.speedup)} > {limit:g}x breaker "
            f"(CI {format_speedup(m.ci_low)}-{format_speedup(m.ci_high)}): a speedup this large is an anomaly "
            "until a human has looked; review the candidate, then `autotune quarantine release ID --reason ...`",
        )
