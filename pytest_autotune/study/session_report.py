"""What a pytest session says about its studies, anchors and re-measurement: the JSON report's ``studies`` key
and the terminal lines after the results table (docs/guide/studies.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional, Sequence

if TYPE_CHECKING:  # pragma: no cover
    from ..protocol import Protocol
    from ..report.snapshot import SessionSnapshot
    from ..result import ItemOutcome
    from .recorder import StudyRecorder
    from .remeasure import RemeasureIndex


def session_studies(studies: "StudyRecorder", outcomes: Sequence["ItemOutcome"], device: str, protocol: "Protocol",
                    measuring: bool, exploratory: bool, remeasure: Optional["RemeasureIndex"]) -> dict[str, Any]:
    """The JSON report's ``studies`` key: this session's studies, anchors and re-measure link."""
    summary = dict(studies.summary(list(outcomes), device, protocol.bands.anchoring, measuring))
    if exploratory:
        summary["studies"] = [{**st, "exploratory": True, "exploratory_reasons": [
            *st["exploratory_reasons"], "this run's protocol is not frozen (an exploratory run)"]}
            for st in summary["studies"]]
    r = remeasure
    summary["remeasure"] = ({"of_run": r.run_id, "linked": len(r.linked), "notes": list(r.notes)}
                            if r is not None else None)
    return summary


def write_terminal(tr: Any, snap: "SessionSnapshot") -> None:
    s = snap.studies
    if not (s["studies"] or s["anchors"] or s["remeasure"] or s["errors"]):
        return
    tr.write_line("")
    for st in s["studies"]:
        its = st["iterations"]
        span = (f", iteration{'s' if len(its) > 1 else ''} {its[0]}" + (f"-{its[-1]}" if len(its) > 1 else "")
                if its else "")
        refused = ", ".join(f"{n} {v}" for v, n in sorted(st["refused"].items()))
        tr.write_line(f"study {st['study']}, arm {st['arm']}{span}: {st['usable']} of {st['items']} item(s) usable"
                      + (f" ({refused})" if refused else "")
                      + ("" if st["recorded"] else " -- not recorded (correctness only: add --autotune)"), bold=True)
        if st["exploratory"]:
            for reason in st["exploratory_reasons"]:
                tr.write_line(f"  EXPLORATORY: {reason}", yellow=True)
        else:
            tr.write_line(f"  pre-registered: {st['registration_detail']}")
        tr.write_line(f"  verdict: autotune study report {st['study']}")
    if s["anchors"]:
        tr.write_line("external anchors (measured ratio vs published; docs/guide/anchors.md):", bold=True)
        for a in s["anchors"]:
            measured = "-" if a["measured_ratio"] is None else f"{a['measured_ratio']:.3g}x"
            tr.write_line(f"  {a['anchor']}: {a['verdict']} -- measured {measured}, published "
                          f"{a['published_ratio']:.3g}x on {a['hardware']}"
                          + ("" if a["registered"] else " [mechanism not pre-registered: "
                             + "; ".join(a["exploratory_reasons"]) + "]"))
    r = s["remeasure"]
    if r is not None:
        tr.write_line(f"re-measures run {r['of_run']}: {r['linked']} result(s) linked row by row "
                      "(autotune remeasure reports agreement and deviation)")
        for n in r["notes"]:
            tr.write_line(f"  note: {n}", yellow=True)
    for e in s["errors"]:
        tr.write_line(f"STUDY: {e}", red=True)
