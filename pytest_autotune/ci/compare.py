"""The regression rule, pure (docs/guide/ci.md#the-rule): two results of one item, each a speedup with its CI
against the strongest frozen baseline re-measured in its own run, give one outcome.

A **regression** is a new CI entirely below the stored CI, by more than the margin::

    new.ci_high < stored.ci_low * (1 - margin)

An **improvement** is the mirror image (``new.ci_low > stored.ci_high * (1 + margin)``); anything else moved
within noise (``same``). Both CIs are the paired-ratio bootstrap CIs of their runs, so each already carries its
run's noise: two runs of an unchanged candidate fail only when both CIs miss the true speedup on opposite sides.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Optional, Sequence

if TYPE_CHECKING:  # pragma: no cover
    from ..result import ItemOutcome
    from .stored import StoredItem, StoredRun

Outcome = Literal[
    "same",  # measured both times, moved within noise (or less than the margin)
    "improved",  # new CI above the stored CI (beyond the margin)
    "regression",  # new CI below the stored CI beyond the margin: fails under --autotune-fail-on=regression
    "refused",  # accepted in the stored run, refused now by a gate (the item fails with the gate's reason)
    "error",  # accepted in the stored run, could not be measured now (sandbox crash, hang, memory)
    "now-accepted",  # refused (or unmeasured) in the stored run, accepted now
    "still-refused",  # refused in both runs
    "unmeasured",  # no speedup on one side (e.g. accepted without timing): nothing to compare
    "new",  # not in the stored run
    "missing",  # in the stored run, not in this session (deselected, removed, or not collected)
]

#: outcomes that fail the item under --autotune-fail-on=regression (refused/error fail by their own verdict)
FAILING: frozenset[str] = frozenset({"regression"})


@dataclass(frozen=True)
class Numbers:
    """One side of a comparison: a speedup and its CI."""

    speedup: float
    ci_low: float
    ci_high: float

    def show(self) -> str:
        return f"{self.speedup:.3f}x [{self.ci_low:.3f}, {self.ci_high:.3f}]"


def parse_margin(text: str) -> float:
    """``--autotune-fail-margin``: ``5%`` or ``5`` (percent) -> 0.05. Raises ValueError for anything else."""
    t = text.strip().removesuffix("%").strip()
    v = float(t)
    if not 0.0 <= v < 100.0 or v != v:
        raise ValueError(f"{text!r}: give a percentage in [0, 100), e.g. 5%")
    return v / 100.0


def compare_numbers(new: Numbers, old: Numbers, margin: float = 0.0) -> Outcome:
    """The rule on two measured results (module docstring)."""
    if new.ci_high < old.ci_low * (1.0 - margin):
        return "regression"
    if new.ci_low > old.ci_high * (1.0 + margin):
        return "improved"
    return "same"


@dataclass(frozen=True)
class ItemComparison:
    """One item's comparison, as the terminal, the Markdown summary, junitxml and the JSON report show it."""

    problem: str
    candidate: str
    device: str
    outcome: Outcome
    nodeid: Optional[str]
    verdict: Optional[str]  # this session's verdict (None: missing)
    stored_verdict: Optional[str]  # the stored run's verdict (None: new)
    new: Optional[Numbers]
    old: Optional[Numbers]
    message: str

    @property
    def fails(self) -> bool:
        return self.outcome in FAILING

    def to_json(self) -> dict[str, Any]:
        def nums(n: Optional[Numbers]) -> Optional[dict[str, Any]]:
            return None if n is None else {"speedup": n.speedup, "ci": [n.ci_low, n.ci_high]}

        return {"nodeid": self.nodeid, "problem": self.problem, "candidate": self.candidate, "device": self.device,
                "outcome": self.outcome, "verdict": self.verdict, "stored_verdict": self.stored_verdict,
                "new": nums(self.new), "stored": nums(self.old), "message": self.message}


def _numbers(speedup: Optional[float], lo: Optional[float], hi: Optional[float]) -> Optional[Numbers]:
    if speedup is None or lo is None or hi is None:
        return None
    return Numbers(float(speedup), float(lo), float(hi))


def rule_text(margin: float) -> str:
    return f"new CI upper end < stored CI lower end x (1 - {margin:.0%})"


def compare_item(outcome: "ItemOutcome", stored: Optional["StoredItem"], margin: float, run_id: str) -> ItemComparison:
    """This session's outcome of one item against the same item (problem, candidate, device) of stored run
    ``run_id`` (None: the item is new)."""
    m = outcome.measurement
    new = _numbers(m.speedup, m.ci_low, m.ci_high) if m is not None else None
    base = dict(problem=outcome.problem, candidate=outcome.candidate, device=outcome.device, nodeid=outcome.nodeid,
                verdict=outcome.verdict, new=new)
    rid = run_id[:12]
    if stored is None:
        return ItemComparison(**base, outcome="new", stored_verdict=None, old=None,  # type: ignore[arg-type]
                              message=f"new: not in stored run {rid}; nothing to compare (not gated)")
    old = stored.numbers
    was_ok = stored.verdict == "accepted"
    common = dict(base, stored_verdict=stored.verdict, old=old)
    shown_old = old.show() if old else "accepted (no speedup)"
    if outcome.verdict in ("rejected", "quarantined"):
        if was_ok:
            return ItemComparison(**common, outcome="refused",  # type: ignore[arg-type]
                                  message=f"REFUSED now by {outcome.gate}: {outcome.reason} (stored run {rid}: "
                                          f"accepted, {shown_old})")
        return ItemComparison(**common, outcome="still-refused",  # type: ignore[arg-type]
                              message=f"refused now by {outcome.gate}, and in stored run {rid} by {stored.gate}")
    if outcome.verdict == "error":
        return ItemComparison(**common, outcome="error" if was_ok else "still-refused",  # type: ignore[arg-type]
                              message=f"ERROR now ({outcome.gate}): {outcome.reason} (stored run {rid}: "
                                      f"{stored.verdict}{', ' + old.show() if old else ''})")
    if not was_ok:
        return ItemComparison(**common, outcome="now-accepted",  # type: ignore[arg-type]
                              message=f"accepted now; stored run {rid} refused it ({stored.gate}: {stored.reason})")
    if new is None or old is None:
        return ItemComparison(**common, outcome="unmeasured",  # type: ignore[arg-type]
                              message=f"no speedup on {'this session' if new is None else 'the stored run'}'s "
                                      "side: nothing to compare (run with --autotune)")
    verdict = compare_numbers(new, old, margin)
    if verdict == "regression":
        msg = (f"REGRESSION beyond noise vs stored run {rid}: speedup {new.show()} now, {old.show()} stored "
               f"({rule_text(margin)}: {new.ci_high:.3f} < {old.ci_low * (1 - margin):.3f})")
    elif verdict == "improved":
        msg = f"improved beyond noise: {new.show()} now, {old.show()} stored"
    else:
        msg = f"within noise: {new.show()} now, {old.show()} stored"
    return ItemComparison(**common, outcome=verdict, message=msg)  # type: ignore[arg-type]


def missing_item(stored: "StoredItem", run_id: str) -> ItemComparison:
    return ItemComparison(problem=stored.problem, candidate=stored.candidate, device=stored.device,
                          outcome="missing", nodeid=stored.nodeid, verdict=None, stored_verdict=stored.verdict,
                          new=None, old=stored.numbers,
                          message=f"missing: in stored run {run_id[:12]} ({stored.verdict}), not run in this session")


def compare_session(outcomes: Sequence["ItemOutcome"], stored: "StoredRun", margin: float,
                    selected: Optional[frozenset[tuple[str, str]]] = None) -> list[ItemComparison]:
    """Every item of this session against the stored run, then every stored item this session did not run
    (with ``selected``, e.g. ``--autotune-changed-only``: only those whose (problem, candidate) was selected)."""
    out: list[ItemComparison] = []
    seen = set()
    for o in sorted(outcomes, key=lambda o: o.nodeid):
        key = (o.problem, o.candidate, o.device)
        seen.add(key)
        out.append(compare_item(o, stored.items.get(key), margin, stored.run_id))
    for key in sorted(set(stored.items) - seen):
        if selected is not None and key[:2] not in selected:
            continue
        out.append(missing_item(stored.items[key], stored.run_id))
    return out


def counts(comparisons: Sequence[ItemComparison]) -> dict[str, int]:
    c: dict[str, int] = {}
    for x in comparisons:
        c[x.outcome] = c.get(x.outcome, 0) + 1
    return c
