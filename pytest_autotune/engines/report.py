"""The session-end section for engine items: per item the paired ratio with its CI, both arms' requests/s, the
quality gate and treatment delivery (the main table above it lists every item with its verdict)."""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING, Any, Optional, Sequence

if TYPE_CHECKING:  # pragma: no cover
    from ..result import ItemOutcome


def _ratio(x: float) -> str:
    return f"{x:.3f}x"


def _median_rps(launches: list[dict], arm: str) -> Optional[float]:
    xs = [r for lo in launches if lo.get("arm") == arm for r in lo.get("requests_per_s") or []]
    return statistics.median(xs) if xs else None


def engine_lines(outcome: Any) -> list[str]:
    d = outcome.details or {}
    launches = d.get("launches") or []
    m = outcome.measurement
    head = f"{outcome.problem} {outcome.candidate}: "
    if m is not None:
        head += f"{_ratio(m.speedup)} [{_ratio(m.ci_low)}, {_ratio(m.ci_high)}] of the default's req/s, {m.n_pairs} pairs"
    else:
        head += outcome.verdict + (f" ({outcome.gate})" if outcome.gate else "")
    lines = [head]
    a, b = _median_rps(launches, "default"), _median_rps(launches, "config")
    if a is not None or b is not None:
        lines.append(f"    requests/s (median window): default {a or 0:.2f}, configuration {b or 0:.2f}")
    q = d.get("quality") or {}
    if q.get("config_vs_default"):
        worst = min(q["config_vs_default"], key=lambda x: x["agreement"])
        self_ = q.get("default_vs_itself") or []
        floor = f"; default vs itself {min(x['agreement'] for x in self_):.3f}" if self_ else ""
        lines.append(f"    quality gate: token agreement {worst['agreement']:.3f} "
                     f"({worst['identical_prompts']}/{worst['prompts']} answers identical), threshold "
                     f"{q.get('threshold')}{floor}")
    deliveries = d.get("delivery") or []
    if deliveries:
        lines.append(f"    treatment delivery: {deliveries[-1]['reason']}")
    if outcome.verdict != "accepted":
        lines.append(f"    {outcome.verdict.upper()} ({outcome.gate}): {outcome.reason.splitlines()[0][:300]}")
    return lines


def write_engine_summary(tr: Any, outcomes: "Sequence[ItemOutcome]") -> None:
    outs = sorted((o for o in outcomes if o.kind == "engine"), key=lambda o: (o.problem, o.candidate))
    if not outs:
        return
    tr.write_sep("-", "engine items: configuration / default requests/s, paired per window [95% CI]")
    for o in outs:
        for i, line in enumerate(engine_lines(o)):
            tr.write_line(line, bold=(i == 0))
