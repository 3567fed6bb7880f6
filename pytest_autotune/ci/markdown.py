"""The Markdown summary (``--autotune-md=PATH``, and ``$GITHUB_STEP_SUMMARY`` on GitHub Actions): old vs new speedup
[CI] and the verdict per item, the rule, and what was refused or not compared (docs/guide/ci.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Sequence

from .compare import counts, rule_text

if TYPE_CHECKING:  # pragma: no cover
    from ..result import ItemOutcome
    from .compare import ItemComparison, Numbers
    from .stored import StoredRun

_MARK = {"regression": "❌ regression", "refused": "❌ refused", "error": "❌ error", "improved": "✅ improved",
         "same": "✅ within noise", "now-accepted": "✅ now accepted", "still-refused": "⚠️ still refused",
         "unmeasured": "⚠️ unmeasured", "new": "🆕 new (not gated)", "missing": "⚠️ missing (not run)"}


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _nums(n: Optional["Numbers"]) -> str:
    return "–" if n is None else f"{n.speedup:.3f}x [{n.ci_low:.3f}, {n.ci_high:.3f}]"


def render(outcomes: Sequence["ItemOutcome"], comparisons: Optional[Sequence["ItemComparison"]],
           stored: Optional["StoredRun"], margin: float, gating: bool, run_id: str, device: str) -> str:
    lines = [f"## pytest-autotune: run `{run_id[:12]}` on {device}", ""]
    if comparisons is None or stored is None:
        lines += ["| item | verdict | speedup [95% CI] | baseline | note |", "|---|---|---|---|---|"]
        for o in sorted(outcomes, key=lambda o: o.nodeid):
            m = o.measurement
            sp = "–" if m is None else f"{m.speedup:.3f}x [{m.ci_low:.3f}, {m.ci_high:.3f}]"
            note = "" if o.verdict == "accepted" else f"{o.gate}: {o.reason}"
            lines.append(f"| `{_cell(o.problem)}/{_cell(o.candidate)}` | {o.verdict} | {sp} | {o.baseline or '–'} | "
                         f"{_cell(note[:200])} |")
        return "\n".join(lines) + "\n"
    c = counts(comparisons)
    failing = sum(c.get(k, 0) for k in ("regression", "refused", "error"))
    status = "❌ **gate failed**" if failing and gating else ("❌ failures" if failing else "✅ **gate passed**")
    lines += [f"{status}: compared with stored {stored.describe()}; rule: regression when {rule_text(margin)}"
              + ("" if gating else " (reported only: add --autotune-fail-on=regression to gate)"), "",
              "| outcome | count |", "|---|---|"]
    lines += [f"| {_MARK.get(k, k)} | {v} |" for k, v in sorted(c.items())]
    lines += ["", "| item | verdict (stored → now) | stored speedup [95% CI] | new speedup [95% CI] | outcome |",
              "|---|---|---|---|---|"]
    for x in comparisons:
        verdicts = f"{x.stored_verdict or '–'} → {x.verdict or '–'}"
        lines.append(f"| `{_cell(x.problem)}/{_cell(x.candidate)}` | {verdicts} | {_nums(x.old)} | {_nums(x.new)} | "
                     f"{_MARK.get(x.outcome, x.outcome)} |")
    notes = [x for x in comparisons if x.outcome in ("regression", "refused", "error", "new", "missing")]
    if notes:
        lines += ["", "<details><summary>details</summary>", ""]
        lines += [f"- `{_cell(x.problem)}/{_cell(x.candidate)}`: {_cell(x.message[:400])}" for x in notes]
        lines += ["", "</details>"]
    return "\n".join(lines) + "\n"
