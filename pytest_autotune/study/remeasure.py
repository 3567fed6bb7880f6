"""Re-measurement (``autotune remeasure RUN``, docs/guide/studies.md).

Every accepted result of a run is re-timed in a new run (a fresh pytest session: new nonce, new seeds, new
sandboxes), and each new results row is linked to the row it re-measures (``results.remeasure_of``; the database
checks that both name the same problem and candidate bytes on the same device, in different runs). The report:

* verdict agreement -- the new item is accepted again and makes the same claim: *faster* (95% CI above 1.0),
  *slower* (below 1.0) or *indistinguishable* (the CI holds 1.0);
* the deviation of speedups -- ``|new / old - 1|`` per item: median, 90th percentile, max.

The reference study re-measured 53/53 verdicts with a 0.60% median deviation (on its GPU).
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from ..errors import AutotuneUsageError
from ..store.columns import REMEASURE_RESULTS_PREFIX


def claim(ci_low: Optional[float], ci_high: Optional[float]) -> str:
    if ci_low is None or ci_high is None:
        return "-"
    if ci_low > 1.0:
        return "faster"
    if ci_high < 1.0:
        return "slower"
    return "indistinguishable"


class RemeasureIndex:
    """The plugin side (``--autotune-remeasure=RUN``): which results row of RUN each new result re-measures."""

    def __init__(self, run_id: str, rows: list[dict]) -> None:
        self.run_id = run_id
        self.by_nodeid = {r["nodeid"]: r for r in rows}
        self.linked: list[str] = []
        self.notes: list[str] = []

    @classmethod
    def load(cls, store: Any, run_id: str) -> "RemeasureIndex":
        if not store.has_run(run_id):
            raise AutotuneUsageError(f"--autotune-remeasure={run_id}: no such run in {store.path}; list runs with "
                                     "autotune show")
        return cls(run_id, store.results(run_id))

    def link(self, row: dict) -> dict:
        old = self.by_nodeid.get(row.get("nodeid", ""))
        if old is None:
            return row
        same = all(old[k] == row.get(k) for k in ("kind", "problem", "problem_sha256", "candidate",
                                                  "candidate_sha256", "device"))
        if not same:
            self.notes.append(f"{row['nodeid']}: its problem or candidate bytes (or device) differ from run "
                              f"{self.run_id}'s; measured, not linked as a re-measurement")
            return row
        self.linked.append(row["nodeid"])
        return {**row, "remeasure_of": f"{REMEASURE_RESULTS_PREFIX}{old['id']}"}


@dataclass(frozen=True)
class RemeasurePair:
    nodeid: str
    problem: str
    candidate: str
    old_speedup: float
    old_ci: tuple[float, float]
    new_verdict: str
    new_gate: Optional[str] = None
    new_speedup: Optional[float] = None
    new_ci: Optional[tuple[float, float]] = None
    linked: bool = False

    @property
    def old_claim(self) -> str:
        return claim(*self.old_ci)

    @property
    def new_claim(self) -> str:
        return claim(*self.new_ci) if self.new_ci else "-"

    @property
    def agrees(self) -> bool:
        return self.new_verdict == "accepted" and self.linked and self.old_claim == self.new_claim

    @property
    def deviation(self) -> Optional[float]:
        if self.new_speedup is None or not self.linked:
            return None
        return abs(self.new_speedup / self.old_speedup - 1.0)

    def to_json(self) -> dict:
        return {"nodeid": self.nodeid, "problem": self.problem, "candidate": self.candidate,
                "old_speedup": self.old_speedup, "old_ci": list(self.old_ci), "old_claim": self.old_claim,
                "new_verdict": self.new_verdict, "new_gate": self.new_gate, "new_speedup": self.new_speedup,
                "new_ci": list(self.new_ci) if self.new_ci else None, "new_claim": self.new_claim,
                "linked": self.linked, "agrees": self.agrees, "deviation": self.deviation}


@dataclass
class RemeasureReport:
    run_id: str
    new_run_id: Optional[str]
    device: str
    pairs: list[RemeasurePair]
    notes: list[str] = field(default_factory=list)

    @property
    def agreeing(self) -> int:
        return sum(1 for p in self.pairs if p.agrees)

    def deviations(self) -> list[float]:
        return sorted(d for p in self.pairs if (d := p.deviation) is not None)

    def stats(self) -> dict[str, Optional[float]]:
        d = self.deviations()
        if not d:
            return {"median": None, "p90": None, "max": None}
        p90 = d[min(len(d) - 1, int(round(0.9 * (len(d) - 1))))]
        return {"median": statistics.median(d), "p90": p90, "max": d[-1]}

    def to_json(self) -> dict:
        return {"schema": "pytest-autotune/remeasure/1", "run_id": self.run_id, "new_run_id": self.new_run_id,
                "device": self.device, "items": len(self.pairs), "agreeing": self.agreeing,
                "deviation": self.stats(), "pairs": [p.to_json() for p in self.pairs], "notes": self.notes}

    def render(self) -> str:
        s = self.stats()
        lines = [f"re-measure of run {self.run_id} on {self.device} (new run {self.new_run_id or '-'})", ""]
        rows = [("problem", "candidate", "then", "claim", "now", "claim", "deviation", "agree")]
        for p in self.pairs:
            now = (f"{p.new_speedup:.3f}x [{p.new_ci[0]:.3f}, {p.new_ci[1]:.3f}]" if p.new_speedup is not None
                   and p.new_ci else f"{p.new_verdict}" + (f" ({p.new_gate})" if p.new_gate else ""))
            rows.append((p.problem, p.candidate, f"{p.old_speedup:.3f}x [{p.old_ci[0]:.3f}, {p.old_ci[1]:.3f}]",
                         p.old_claim, now, p.new_claim, "-" if p.deviation is None else f"{p.deviation:.2%}",
                         "yes" if p.agrees else "NO"))
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
        lines.append("")
        med = "-" if s["median"] is None else f"{s['median']:.2%}"
        p90 = "-" if s["p90"] is None else f"{s['p90']:.2%}"
        mx = "-" if s["max"] is None else f"{s['max']:.2%}"
        lines.append(f"verdicts agree: {self.agreeing}/{len(self.pairs)}; speedup deviation |new/old - 1|: median "
                     f"{med}, p90 {p90}, max {mx}")
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)


def build_report(run_id: str, device: str, old_rows: list[dict], new_report: Optional[dict],
                 linked_rows: list[dict]) -> RemeasureReport:
    """Pair every accepted row of the old run with what the new run made of it (from the new run's JSON report
    and its linked results rows)."""
    items = {i["nodeid"]: i for i in (new_report or {}).get("items", [])}
    linked = {r["nodeid"]: r for r in linked_rows}
    pairs: list[RemeasurePair] = []
    notes: list[str] = []
    for old in old_rows:
        n = old["nodeid"]
        item = items.get(n)
        row = linked.get(n)
        if row is not None:
            pairs.append(RemeasurePair(n, old["problem"], old["candidate"], float(old["speedup"]),
                                       (float(old["ci_low"]), float(old["ci_high"])), "accepted", None,
                                       float(row["speedup"]), (float(row["ci_low"]), float(row["ci_high"])), True))
        elif item is not None:
            ci = tuple(item["ci"]) if item.get("ci") else None
            pairs.append(RemeasurePair(n, old["problem"], old["candidate"], float(old["speedup"]),
                                       (float(old["ci_low"]), float(old["ci_high"])), item["verdict"], item["gate"],
                                       item.get("speedup"), ci, False))  # type: ignore[arg-type]
            if item["verdict"] == "accepted":
                notes.append(f"{n}: accepted again but not linked (its bytes changed since run {run_id})")
        else:
            pairs.append(RemeasurePair(n, old["problem"], old["candidate"], float(old["speedup"]),
                                       (float(old["ci_low"]), float(old["ci_high"])), "not run"))
            notes.append(f"{n}: not collected in the new run (file moved or deleted?)")
    run_id_new = ((new_report or {}).get("run") or {}).get("run_id")
    return RemeasureReport(run_id, run_id_new, device, pairs, notes)


def original_options(argv_json: str) -> list[str]:
    """The collection options of the original run's command line that decide which items exist: --problems,
    --candidates, --autotune-aa (as --option=value)."""
    try:
        argv = json.loads(argv_json)
    except ValueError:
        return []
    out: list[str] = []
    i = 0
    while i < len(argv):
        a = str(argv[i])
        for opt in ("--problems", "--candidates"):
            if a == opt and i + 1 < len(argv):
                out.append(f"{opt}={Path(str(argv[i + 1])).as_posix()}")
                i += 1
            elif a.startswith(opt + "="):
                out.append(a)
        if a == "--autotune-aa":
            out.append(a)
        i += 1
    return out
