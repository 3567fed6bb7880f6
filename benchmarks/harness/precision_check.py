"""Was the precision line's promise kept? Reads the report of the run that made it (its ``summary.precision``: the
suggested ``--autotune-max-pairs``, the items it said would reach the target, the time it said it would take) and
the report of the run made with that setting, and prints both side by side with every item's outcome.

    python3 benchmarks/harness/precision_check.py PROMISE.json OUTCOME.json [--log OUTCOME.log]

``--log``: the pytest log of the second run, whose ``wall N s`` line (``/usr/bin/time``, as
benchmarks/harness/cpu_protocol_runs.sh writes it) gives the run's wall time; without it, the sum of the items'
seconds. Markdown on stdout (docs/results/cpu.md).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
from pathlib import Path
from typing import Any, Optional


def _wall(log: Optional[Path]) -> Optional[float]:
    if log is None or not log.exists():
        return None
    m = re.search(r"^wall ([0-9.]+) s$", log.read_text(errors="replace"), re.M)
    return float(m.group(1)) if m else None


def _range(said: dict[str, Any]) -> str:
    low, high = said.get("expected_seconds_low"), said.get("expected_seconds_high")
    return "" if low is None or high is None else f" (range {low / 60:.0f} to {high / 60:.0f} min)"


def check(promise: dict[str, Any], outcome: dict[str, Any], wall_s: Optional[float]) -> str:
    said = promise["summary"]["precision"]
    got = outcome["summary"]["precision"] or {}
    items = [i for i in outcome["items"] if i.get("verdict") == "accepted"]
    refused = [i for i in outcome["items"] if i.get("verdict") != "accepted"]
    seconds = sum(float(i["details"].get("item_seconds") or 0.0) for i in outcome["items"])
    widths = [float(i["details"]["precision"]["ci_rel_width"]) for i in items]
    reached = sum(1 for i in items if i.get("ci_target_met"))
    total = wall_s if wall_s is not None else seconds
    lines = [
        f"Promised by the first run's precision line: `--autotune-max-pairs={said['suggested']}`",
        "",
        "| | promised | measured |",
        "|---|---|---|",
        f"| items at the {said['target']:.1%} CI target | about {said['predicted_reached']} of {said['items']} | "
        f"**{reached} of {len(items)}**" + (f" ({len(refused)} not accepted)" if refused else "") + " |",
        f"| the run's time | about {said['expected_seconds'] / 60:.0f} min{_range(said)}, at most "
        f"{said['most_seconds'] / 60:.0f} min | {total / 60:.1f} min" + (" (wall)" if wall_s is not None else
                                                                        " (items' seconds)") + " |",
        f"| median CI width | | {statistics.median(widths):.1%} |" if widths else "| median CI width | | - |",
        "",
        "| item | pairs of processes | stopped at the target | CI width | speedup [95% CI] | seconds |",
        "|---|---|---|---|---|---|",
    ]
    for i in sorted(outcome["items"], key=lambda x: x["nodeid"]):
        d = i.get("details") or {}
        p, u = d.get("precision") or {}, d.get("until_target") or {}
        ci = i.get("ci") or [None, None]
        sp = (f"{i['speedup']:.3f} [{ci[0]:.3f}, {ci[1]:.3f}]" if i.get("speedup") and ci[0] is not None
              else i.get("verdict", "?"))
        lines.append(f"| {i['problem']}/{i['candidate']} | {p.get('pairs_of_processes', '-')} | "
                     f"{'yes' if u.get('stopped_at_target') else 'no'} | "
                     f"{p['ci_rel_width']:.2%} | {sp} | {float(d.get('item_seconds') or 0):.0f} |"
                     if p else f"| {i['problem']}/{i['candidate']} | - | - | - | {i.get('verdict')}: "
                     f"{str(i.get('reason'))[:80]} | {float(d.get('item_seconds') or 0):.0f} |")
    if got.get("line"):
        lines += ["", f"The second run's own line: `{got['line']}`"]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("promise", type=Path)
    ap.add_argument("outcome", type=Path)
    ap.add_argument("--log", type=Path, default=None)
    a = ap.parse_args()
    print(check(json.loads(a.promise.read_text()), json.loads(a.outcome.read_text()), _wall(a.log)))


if __name__ == "__main__":
    main()
