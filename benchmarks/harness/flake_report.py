"""The flake hunt's report (benchmarks/harness/flake_hunt.py): each run's junitxml read into outcomes, the runs put
side by side, every test that failed or errored in at least one run listed with the runs it failed in and its
failure text from each, and the whole written as JSON and Markdown.

Pure functions of the files: ``python benchmarks/harness/flake_hunt.py --report-only OUT`` writes the report again
from a hunt's folder without running anything.

A test's id is pytest's node id, rebuilt from junitxml's ``file`` and ``classname`` (the hunt asks pytest for
``junit_family=xunit1``, which writes ``file``); without ``file`` the dotted ``classname`` is read as a path.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

#: characters of a failure's text kept per run (its end: where pytest puts the assertion and its values)
TEXT_CHARS = 6000
OUTCOMES = ("passed", "failed", "error", "skipped")
#: a test reported twice in one run (a call failure, then a teardown error) keeps its most severe outcome
SEVERITY = {"passed": 0, "skipped": 1, "error": 2, "failed": 3}


@dataclass(frozen=True)
class Outcome:
    test: str
    outcome: str  # one of OUTCOMES
    message: str
    text: str
    seconds: float


def node_id(attrs: dict[str, str]) -> str:
    """pytest's node id of a junitxml ``testcase``: ``tests/test_x.py::TestY::test_z[p]``."""
    name = attrs.get("name", "")
    classname = attrs.get("classname", "")
    path = attrs.get("file", "")
    if not path:
        if not classname:  # a collection error: the name is the module's dotted path
            return name.replace(".", "/") + ".py"
        parts = classname.split(".")
        inner = [p for p in parts if p[:1].isupper()]
        module = parts[:len(parts) - len(inner)]
        return "::".join(["/".join(module) + ".py", *inner, name])
    module = path[:-3].replace("/", ".") if path.endswith(".py") else path
    inner = classname[len(module) + 1:] if classname.startswith(module + ".") else ""
    return "::".join([path, *([p for p in inner.split(".") if p]), name])


def _outcome(case: ET.Element) -> tuple[str, str, str]:
    """(outcome, message, text): a failure or an error (setup or teardown) before a skip; none of them: passed."""
    found = {child.tag: child for child in case}
    for tag, outcome in (("failure", "failed"), ("error", "error"), ("skipped", "skipped")):
        if tag in found:
            el = found[tag]
            return outcome, el.get("message", ""), el.text or ""
    return "passed", "", ""


def read_junit(path: Path, redact: Optional[dict[str, str]] = None) -> list[Outcome]:
    """Every testcase of a junitxml file, in file order. ``redact`` maps strings to their replacement in messages
    and texts (the checkout's path to ``<repository>``)."""
    out = []
    for case in ET.parse(path).getroot().iter("testcase"):
        outcome, message, text = _outcome(case)
        for old, new in (redact or {}).items():
            message, text = message.replace(old, new), text.replace(old, new)
        out.append(Outcome(node_id(dict(case.attrib)), outcome, message, text[-TEXT_CHARS:],
                           float(case.get("time", "0") or 0)))
    return out


def counts(outcomes: list[Outcome]) -> dict[str, int]:
    tally = {k: 0 for k in OUTCOMES}
    for o in outcomes:
        tally[o.outcome] += 1
    return tally


def aggregate(runs: list[dict], outcomes: dict[int, Optional[list[Outcome]]]) -> dict:
    """The hunt's report from each run's record (``run`` its number, ``load``, ``wall_s``, ``rc``...) and its
    outcomes (None: the run left no junitxml). A test is listed when it failed or errored in any run."""
    table = []
    by_test: dict[str, dict[int, Outcome]] = {}
    for run in runs:
        got = outcomes.get(run["run"])
        row = dict(run)
        row["counts"] = counts(got) if got is not None else None
        slowest = sorted(got or [], key=lambda o: -o.seconds)[:5]
        row["slowest"] = [{"test": o.test, "seconds": round(o.seconds, 2)} for o in slowest]
        table.append(row)
        for o in got or []:
            # a test with a call failure and a teardown error appears once; keep the failure
            prev = by_test.setdefault(o.test, {}).get(run["run"])
            if prev is None or SEVERITY[o.outcome] > SEVERITY[prev.outcome]:
                by_test[o.test][run["run"]] = o
    numbers = [r["run"] for r in runs]
    failing = []
    for test, per_run in by_test.items():
        bad = [n for n in numbers if n in per_run and per_run[n].outcome in ("failed", "error")]
        if not bad:
            continue
        failing.append({
            "test": test,
            "failed_runs": bad,
            "outcomes": {str(n): per_run[n].outcome if n in per_run else "absent" for n in numbers},
            "failures": [{"run": n, "outcome": per_run[n].outcome, "message": per_run[n].message,
                          "text": per_run[n].text} for n in bad],
        })
    failing.sort(key=lambda f: (-len(f["failed_runs"]), f["test"]))
    no_junit = [r["run"] for r in runs if outcomes.get(r["run"]) is None]
    green = [r["run"] for r in table if r["counts"] is not None and r["rc"] == 0
             and r["counts"]["failed"] == 0 and r["counts"]["error"] == 0]
    return {"runs": table, "failing": failing,
            "summary": {"runs": len(runs), "green": len(green), "tests_failed_at_least_once": len(failing),
                        "runs_without_junitxml": no_junit}}


def _load_text(load: dict) -> str:
    hog = load.get("hog")
    if not hog:
        text = "no hog"
    else:
        where = f"on CPU {','.join(map(str, hog['cpus']))}" if hog.get("cpus") else "unpinned"
        got = hog.get("achieved", {}).get("duty_achieved")
        text = f"hog {hog['procs']} x {hog['duty']:.0%} {where}" + (f" (achieved {got:.0%})" if got is not None else "")
    machine = load.get("machine_busy")
    if machine is not None:
        text += f"; machine {machine:.0%} busy"
    if load.get("others_cpu_s") is not None:
        text += f", others ~{load['others_cpu_s']:.0f} CPU-s"
    if load.get("loadavg_end"):
        text += f"; load avg {load['loadavg_end'][0]:.1f}"
    return text


def _fence(text: str) -> str:
    return "```\n" + text.replace("```", "'''").rstrip() + "\n```"


def markdown(report: dict, head: dict) -> str:
    """The report as Markdown: ``head`` says what was run (date, commit, command, machine, rerun command)."""
    s = report["summary"]
    lines = [f"# Flake hunt, {head.get('date', '')} at {head.get('commit', '')}", ""]
    lines += [f"- command (each run): `{head.get('command', '')}`",
              f"- machine: {head.get('machine', '')}",
              f"- rerun: `{head.get('rerun', '')}`",
              f"- **{s['runs']} run(s), {s['green']} green; {s['tests_failed_at_least_once']} test(s) failed in at "
              "least one run**", ""]
    lines += ["| run | started (UTC) | load | wall | passed | failed | errors | skipped | exit |",
              "|---|---|---|---|---|---|---|---|---|"]
    for r in report["runs"]:
        c = r["counts"] or {}
        lines.append(f"| {r['run']} | {r.get('started', '')} | {_load_text(r.get('load', {}))} | {r['wall_s']:.0f} s | "
                     + " | ".join(str(c.get(k, "-")) for k in OUTCOMES) + f" | {r['rc']} |")
    lines.append("")
    if s["runs_without_junitxml"]:
        lines += [f"Runs that left no junitxml (see their pytest.log): {s['runs_without_junitxml']}", ""]
    lines += ["## Tests that failed at least once", ""]
    if not report["failing"]:
        lines += ["None.", ""]
    for f in report["failing"]:
        lines += [f"### `{f['test']}`", "",
                  f"Failed in run(s) {', '.join(map(str, f['failed_runs']))} of {s['runs']}; per run: "
                  + ", ".join(f"{n}: {o}" for n, o in f["outcomes"].items()) + ".", ""]
        for fail in f["failures"]:
            lines += [f"Run {fail['run']} ({fail['outcome']}): {fail['message'][:300]}", "", _fence(fail["text"]), ""]
    return "\n".join(lines)


__all__ = ["Outcome", "node_id", "read_junit", "counts", "aggregate", "markdown", "TEXT_CHARS", "OUTCOMES"]
