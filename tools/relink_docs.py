"""Rewrite citations of docs pages that moved (2026-12-05: docs/ became guide/, reference/, results/, design/).

    python3 tools/relink_docs.py            # rewrite every tracked text file in place; print what it changed
    python3 tools/relink_docs.py --check    # change nothing; exit 1 and list what is left to rewrite

It reads every file git tracks (not docs/data/, which is raw measurement output, and not this file) and rewrites:

* ``docs/OLD.md, "Section title"`` (or ``docs/OLD.md "Section title"``) to ``docs/NEW.md#anchor`` where SECTIONS maps
  the section; to ``docs/NEW.md, "Section title"`` (with a warning) where it does not;
* ``docs/OLD.md#anchor`` and a bare ``docs/OLD.md`` to ``docs/NEW.md`` (anchor kept, or mapped by SECTIONS);
* ``docs/PAGE.md#anchor`` of a section that moved off a page that stays (``relink_moved_sections.json``: the dated
  history of results/cpu.md and results/h200.md, 2026-12-05) to the section's new page, in code and in pages, and
  a page's relative Markdown link to such a section (``[...](cpu.md#anchor)``) to the new page;
* inside docs/*.md pages (not the notes under docs/data/), the same citations as Markdown links relative to the page (``[Section title](../design/
  protocol.md#anchor)``; a bare path: the target page's title), except in code spans and fenced code blocks.

Rerunnable: a citation that no longer names a moved page is left alone, so running it again changes nothing, and
running it after merging a branch written against the old paths rewrites that branch's citations.
``tests/test_docs_paths.py`` checks that every ``docs/....md`` path and ``#anchor`` cited anywhere exists.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: old page -> new page (docs/architecture.md stays where it is: code comments cite it by section)
PAGES = {
    "docs/threat-model.md": "docs/design/threat-model.md",
    "docs/design-notes.md": "docs/design/departures.md",
    "docs/harness.md": "docs/results/cpu.md",
    "docs/results-h200.md": "docs/results/h200.md",
    "docs/protocol.md": "docs/reference/protocol.md",
    "docs/schema.md": "docs/reference/store.md",
    "docs/report.md": "docs/reference/report.md",
    "docs/suite.md": "docs/guide/candidates.md",
    "docs/engines.md": "docs/guide/engines.md",
    "docs/studies.md": "docs/guide/studies.md",
    "docs/agent.md": "docs/guide/llm-tuner.md",
    "docs/anchors.md": "docs/guide/anchors.md",
    "docs/ci.md": "docs/guide/ci.md",
    "docs/heldout.md": "docs/guide/heldout.md",
    "docs/xdist.md": "docs/guide/parallel.md",
}

_CPU_OFFSET_NOT = ("docs/results/cpu.md#what-the-per-process-offset-is-not-code-numa-a-shared-component-large-blocks-"
                   "from-the-heap-2026-12-03-dfbd585")

#: (old page, cited section title) -> new page#anchor; titles compare case-insensitively, whitespace collapsed
SECTIONS = {
    ("docs/harness.md", "Derived input sets"): "docs/design/protocol.md#derived-input-sets",
    ("docs/harness.md", "Fresh placements"): "docs/design/protocol.md#fresh-placements",
    ("docs/harness.md", "A/A across processes"): "docs/design/protocol.md#pairs-of-processes",
    ("docs/harness.md", "A/A across processes: protocol 5"): "docs/design/protocol.md#pairs-of-processes",
    ("docs/harness.md", "protocol 5"): "docs/design/protocol.md#pairs-of-processes",
    ("docs/harness.md", "A/A bias: where the rounds were built"): "docs/design/protocol.md#where-the-rounds-are-built",
    ("docs/harness.md", "Where the per-process offset lives"): "docs/design/protocol.md#the-per-process-offset",
    ("docs/harness.md", "What the sibling offset is not"): _CPU_OFFSET_NOT,
    ("docs/harness.md", "Large blocks from the heap: not robust"): _CPU_OFFSET_NOT,
    ("docs/harness.md", "A/A bias"): "docs/results/cpu-2026-11-30.md#aa-bias-protocol-1-2026-11-30",
    ("docs/harness.md", "Re-measure deviation"): "docs/results/cpu-2026-11-30.md#re-measure-deviation-2026-11-30",
    ("docs/harness.md", "Per-item overhead"): "docs/results/cpu-2026-11-30.md#per-item-overhead-2026-11-30-protocol-5-2026-12-02",
    ("docs/harness.md", "The jail's cost"): "docs/results/cpu-2026-12-01.md#the-jails-cost-2026-12-01",
    ("docs/harness.md", "suite-time-4"): "docs/results/test-suite.md#process-exits-jail-and-catalog-2026-12-02-e421431",
    ("docs/harness.md", "The test suite's time"): "docs/results/test-suite.md",
    ("docs/results-h200.md", "The 4 us yardstick and the baseline's probe"): "docs/design/protocol.md#the-cuda-sample",
    ("docs/results-h200.md", "Protocol 8's code on the H200"):
        "docs/results/h200-2026-12-03.md#protocol-8s-code-on-the-h200-2026-12-03-e0576c3",
    ("docs/results-h200.md", "Launch-bound references"):
        "docs/results/h200-2026-12-02.md#launch-bound-references-the-ratio-is-the-host-cpus",
    ("docs/results-h200.md", "KernelBench at published sizes"):
        "docs/results/h200-2026-12-02.md#kernelbench-level-1-at-published-sizes-aa",
    ("docs/results-h200.md", "Duty cycle"): "docs/results/h200-2026-12-02.md#duty-cycle",
    ("docs/results-h200.md", "At main after the sandbox exit and zygote changes"):
        "docs/results/h200-2026-12-02.md#after-the-sandbox-exit-and-zygote-changes-2026-12-02-faf4e7d",
    ("docs/results-h200.md", "Protocol 5 on the H200"): "docs/results/h200-2026-12-02.md#protocol-5-on-the-h200-2026-12-02-2daae55",
    ("docs/results-h200.md", "The CUDA device"): "docs/guide/gpu.md#what-a-sample-is",
    ("docs/results-h200.md", "How to measure"): "docs/maintainers.md#gpu-measurements",
    ("docs/anchors.md", "H200, twelfth session"):
        "docs/results/anchors.md#2026-12-03-a3804d5-protocol-6-9-of-9-and-where-they-differ-from-do_bench",
    ("docs/anchors.md", "H200, eleventh session"): "docs/results/anchors.md#2026-12-02-b4703a2-protocol-6",
    ("docs/threat-model.md", "The jail"): "docs/design/threat-model.md#the-jail",
    ("docs/threat-model.md", "Thresholds"): "docs/design/threat-model.md#thresholds-and-what-honest-candidates-measure",
    ("docs/threat-model.md", "The catalog"): "docs/design/threat-model.md#the-catalog",
    ("docs/threat-model.md", "Honest limits"): "docs/design/threat-model.md#honest-limits",
    ("docs/threat-model.md", "Where things run"): "docs/design/threat-model.md#where-things-run",
    ("docs/threat-model.md", "Serving-engine configurations"): "docs/design/threat-model.md#serving-engine-configurations",
    ("docs/threat-model.md", "Studies: when the adversary runs the study"):
        "docs/design/threat-model.md#studies-when-the-adversary-runs-the-study",
    ("docs/threat-model.md", "no candidate code outside its calls"):
        "docs/architecture.md#no-candidate-code-outside-its-calls",
    ("docs/threat-model.md", "no GPU work of the candidate's outside its own calls"):
        "docs/design/threat-model.md#the-catalog",
    ("docs/architecture.md", "The flow"): "docs/architecture.md#the-flow",
    ("docs/architecture.md", "Processes"): "docs/architecture.md#processes",
    ("docs/architecture.md", "Memory planned per device"): "docs/architecture.md#memory-planned-per-device",
    ("docs/architecture.md", "Outputs cross by handle"): "docs/architecture.md#outputs-cross-by-handle",
    ("docs/architecture.md", "Modules, one job each"): "docs/architecture.md#modules-one-job-each",
    ("docs/architecture.md", "Arms in separate processes"): "docs/architecture.md#arms-in-separate-processes",
    ("docs/architecture.md", "No candidate code outside its calls"):
        "docs/architecture.md#no-candidate-code-outside-its-calls",
    ("docs/architecture.md", "Extension hooks"): "docs/architecture.md#extension-hooks",
    ("docs/architecture.md", "Session"): "docs/architecture.md#modules-one-job-each",
    ("docs/architecture.md", "Reports"): "docs/architecture.md#modules-one-job-each",
    ("docs/studies.md", "Search templates"): "docs/guide/studies.md#seeded-search-baselines-autotune-search",
    ("docs/studies.md", "Search"): "docs/guide/studies.md#seeded-search-baselines-autotune-search",
    ("docs/studies.md", "Plots"): "docs/guide/studies.md#plots",
    ("docs/studies.md", "Verdicts"): "docs/guide/studies.md#verdicts",
    ("docs/studies.md", "Treatment delivery"): "docs/guide/studies.md#treatment-delivery",
    ("docs/studies.md", "Threat model for studies"): "docs/guide/studies.md#threat-model-for-studies",
    ("docs/schema.md", "verify"): "docs/reference/store.md#verify",
    ("docs/schema.md", "merge"): "docs/reference/store.md#merge",
    ("docs/schema.md", "Rules"): "docs/reference/store.md#rules",
    ("docs/schema.md", "Files, transactions, crash safety"): "docs/reference/store.md#files-transactions-crash-safety",
    ("docs/schema.md", "Tables and columns"): "docs/reference/store.md#tables-and-columns",
    ("docs/schema.md", "Studies"): "docs/reference/store.md#studies-migration-0005_study",
    ("docs/schema.md", "Opening a store: what is refused"): "docs/reference/store.md#opening-a-store-what-is-refused",
    ("docs/schema.md", "Migrations"): "docs/reference/store.md#migrations",
    ("docs/schema.md", "Hash chains and MACs"): "docs/reference/store.md#hash-chains-and-macs",
    ("docs/schema.md", "Error messages and rule names"): "docs/reference/store.md#error-messages-and-rule-names",
    ("docs/engines.md", "Stopping servers"): "docs/guide/engines.md#stopping-servers",
    ("docs/engines.md", "Where the load generator runs"): "docs/guide/engines.md#where-the-load-generator-runs",
    ("docs/engines.md", "Quality gate"): "docs/guide/engines.md#quality-gate",
    ("docs/engines.md", "Treatment delivery"): "docs/guide/engines.md#treatment-delivery",
    ("docs/engines.md", "Pairs and windows"): "docs/guide/engines.md#pairs-and-windows",
    ("docs/engines.md", "How the numbers were measured"): "docs/results/engines.md",
    ("docs/engines.md", "CI"): "docs/guide/engines.md#ci",
    ("docs/ci.md", "The rule"): "docs/guide/ci.md#the-rule",
    ("docs/ci.md", "Self-hosted GPU runner"): "docs/guide/ci.md#self-hosted-gpu-runner",
    ("docs/ci.md", "False-alarm rate"): "docs/results/ci.md",
    ("docs/ci.md", "A baseline that travels"): "docs/guide/ci.md#a-baseline-that-travels",
    ("docs/agent.md", "Unusable iterations"): "docs/guide/llm-tuner.md#unusable-iterations",
    ("docs/agent.md", "The loop"): "docs/guide/llm-tuner.md#the-loop",
    ("docs/agent.md", "The call log"): "docs/guide/llm-tuner.md#the-call-log",
    ("docs/agent.md", "Calls that behave"): "docs/guide/llm-tuner.md#calls-that-behave",
    ("docs/agent.md", "Measured here"):
        "docs/results/studies.md#the-llm-tuner-against-a-scripted-endpoint-and-a-tiny-local-model-cpu-2026-12-02",
}

#: sections that moved off a page that stays: "docs/PAGE.md#anchor" -> "docs/NEW.md#anchor"
MOVED = json.loads((ROOT / "tools" / "relink_moved_sections.json").read_text())["moved"]

#: raw measurement output; the notes written by hand beside it (README.md, SUMMARY.md) are rewritten like any page
SKIP_PREFIXES = ("docs/data/",)
HAND_WRITTEN_DATA_NOTES = ("README.md", "SUMMARY.md")
SKIP_FILES = ("tools/relink_docs.py", "tools/relink_moved_sections.json")

_PATH = r"(?<![\w/.-])(docs/[\w./-]+?\.md)(#[\w-]+)?"
_TITLE = r"(?:,[ \t]*\n?[ \t]*|[ \t]+)\"([^\"\n]{1,80}(?:\n[^\"\n]{1,80})?)\""
CITATION = re.compile(_PATH + f"(?:{_TITLE})?")


def _norm(title: str) -> str:
    """Case and whitespace aside; a title broken over two comment lines keeps no comment marker."""
    return " ".join(re.sub(r"\n\s*(#|//)", " ", title).split()).lower()


_SECTIONS = {(old, _norm(t)): new for (old, t), new in SECTIONS.items()}


def _title(page: Path) -> str:
    """A docs page's H1, for the text of a link to it."""
    try:
        for line in page.read_text(encoding="utf-8").splitlines():
            if line.startswith("# "):
                return re.sub(r"[`*]", "", line[2:]).strip()
    except OSError:
        pass
    return page.stem


def _target(old: str, anchor: str | None, title: str | None) -> tuple[str | None, bool]:
    """(new path[#anchor] or None when ``old`` did not move and no section maps, whether ``title`` was consumed)."""
    if title is not None:
        new = _SECTIONS.get((old, _norm(title)))
        if new is not None:
            return new, True
    if anchor and f"{old}{anchor}" in MOVED:
        return MOVED[f"{old}{anchor}"], False
    if old not in PAGES:
        return None, False
    new = PAGES[old]
    if anchor:
        return new + anchor, False
    return new, False


def _in_code(line_prefix: str) -> bool:
    return line_prefix.count("`") % 2 == 1


def rewrite(rel: str, text: str, warn: list[str]) -> str:
    """The text of file ``rel`` with its citations of moved pages rewritten."""
    is_page = rel.startswith("docs/") and rel.endswith(".md") and not rel.startswith(SKIP_PREFIXES)
    page_dir = Path(rel).parent
    out: list[str] = []
    pos = 0
    fence_at = [m.start() for m in re.finditer(r"(?m)^\s*```", text)] if is_page else []

    def in_fence(i: int) -> bool:
        return sum(1 for f in fence_at if f < i) % 2 == 1

    for m in CITATION.finditer(text):
        old, anchor, title = m.group(1), m.group(2), m.group(3)
        new, used_title = _target(old, anchor, title)
        if new is None:
            continue
        if title is not None and not used_title and old in PAGES:
            warn.append(f"{rel}: {old}, \"{' '.join(title.split())}\": no section mapping, kept as a quoted title")
        line_start = text.rfind("\n", 0, m.start()) + 1
        code = is_page and (in_fence(m.start()) or _in_code(text[line_start:m.start()]))
        if is_page and not code:
            path, _, frag = new.partition("#")
            relpath = os.path.relpath(path, page_dir) + (f"#{frag}" if frag else "")
            label = " ".join(title.split()) if used_title and title else _title(ROOT / path)
            repl = f"[{label}]({relpath})"
            if title is not None and not used_title:
                repl += f", \"{title}\""
        else:
            repl = new + (f", \"{title}\"" if title is not None and not used_title else "")
        out.append(text[pos:m.start()])
        out.append(repl)
        pos = m.end()
    if out:
        out.append(text[pos:])
        text = "".join(out)
    return _relink_relative(rel, text) if is_page else text


_LINK = re.compile(r"\]\(([^)\s#]+\.md)(#[\w-]+)\)")


def _relink_relative(rel: str, text: str) -> str:
    """A page's relative links to sections that moved off a page that stays (MOVED), to their new page."""
    page_dir = Path(rel).parent

    def fix(m: re.Match) -> str:
        link, anchor = m.group(1), m.group(2)
        if re.match(r"[a-z]+://", link):
            return m.group(0)
        new = MOVED.get(os.path.normpath(page_dir / link) + anchor)
        if new is None:
            return m.group(0)
        path, _, frag = new.partition("#")
        target = "#" + frag if path == rel else f"{os.path.relpath(path, page_dir)}#{frag}"
        return f"]({target})"

    return _LINK.sub(fix, text)


def tracked_text_files() -> list[str]:
    names = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout.split(b"\0")
    files = []
    for raw in names:
        rel = raw.decode()
        if not rel or rel in SKIP_FILES:
            continue
        if rel.startswith(SKIP_PREFIXES) and rel.rsplit("/", 1)[-1] not in HAND_WRITTEN_DATA_NOTES:
            continue
        p = ROOT / rel
        if not p.is_file() or p.is_symlink():
            continue
        data = p.read_bytes()
        if b"\0" in data[:4096]:
            continue
        files.append(rel)
    return files


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 when a citation is left")
    args = ap.parse_args(argv)
    warn: list[str] = []
    changed = []
    for rel in tracked_text_files():
        p = ROOT / rel
        try:
            text = p.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        new = rewrite(rel, text, warn)
        if new != text:
            changed.append(rel)
            if not args.check:
                p.write_text(new, encoding="utf-8")
    for w in warn:
        print("warning:", w, file=sys.stderr)
    verb = "to rewrite" if args.check else "rewritten"
    for rel in changed:
        print(f"{verb}: {rel}")
    print(f"{len(changed)} file(s) {verb}")
    return 1 if (args.check and changed) else 0


if __name__ == "__main__":
    sys.exit(main())
