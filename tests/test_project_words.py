"""The project speaks of itself only: no text file names a development session ("the eleventh session"), an issue
number ("issue 28") or the tools of the place it was developed in ("device call", a `carry` list, lent machines,
helpers, machine kinds, the workplace's paths). Say instead what a reader can check: a date, a commit, a protocol
version, a command ("on the H200 host, 2026-12-03, a3804d5"; "copy `.whl/` to the GPU host"). pytest's own sessions
are not these: only ordinals from "third" up are matched."""

from __future__ import annotations

import re

from docs_pages import RAW_DATA, REPO, tracked_text_files

_ORDINALS = ("third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth|thirteenth|fourteenth|fifteenth|"
             "sixteenth|seventeenth|eighteenth|nineteenth|twentieth")
WORDS = [
    (rf"\b({_ORDINALS})[- ]sessions?\b", "a development session: give the date and commit"),
    (r"\bissues?[ -]?#?\d+", "an issue number: say what it was about, or give the commit"),
    (r"\(#\d+\)", "an issue number: say what it was about, or give the commit"),
    (r"\bdevice[- ]calls?\b", "the workplace's device tool: say 'a run on the GPU host' and give its command"),
    (r"\bdevice tool\b", "the workplace's device tool: say 'the GPU host'"),
    (r"\bcarry:\s*\[|`carry`|\bcarry\s+`?\.(whl|kb)|\bcarried wheels\b", "the device tool's carry: say 'copy .whl/ to the GPU host'"),
    (r"\blent\b", "a lent machine: name the machine (the H200 host, the 2-vCPU VM)"),
    (r"\bsub-?agents?\b", "the workplace's helpers"),
    (r"\banother helper's\b|\bby a helper\b|\bhelper's test files\b", "the workplace's helpers: say 'another checkout'"),
    (r"\bKINDS\.md\b|\bnvidia-h200(-x\d+)?\b", "the device tool's machine kinds: say 'an H200 host', 'a host with two H200s'"),
    (r"/work/(main|wt-[\w-]+)\b", "a path of the workplace: give a path in the repository, or <repository>"),
    (r"\bthe lead('s)?\b|\(lead\b", "the workplace's lead: say who or what decided, as a commit"),
    (r"\bother sessions'|\bagents' sessions\b", "other development sessions: say 'other work on the machine'"),
]
PATTERNS = [(re.compile(p, re.IGNORECASE), why) for p, why in WORDS]

#: raw measurement output under docs/data (reports, logs, data summaries written by scripts); the notes written by
#: hand beside them (README.md, SUMMARY.md) are the project's prose and are checked
def _machine_output(rel: str) -> bool:
    return rel.startswith(RAW_DATA) and rel.rsplit("/", 1)[-1] not in ("README.md", "SUMMARY.md")


#: files that must name the old words: this test's patterns, and the relink script's table of old citations
QUOTES_THEM = {"tests/test_project_words.py", "tools/relink_docs.py"}


def _findings(rel: str, text: str) -> list[str]:
    out = []
    for pattern, why in PATTERNS:
        for m in pattern.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            out.append(f"{rel}:{line}: {m.group(0)!r}: {why}")
    return out


def test_no_text_names_development_sessions_issue_numbers_or_the_workplace():
    found = []
    for rel in tracked_text_files():
        if _machine_output(rel) or rel in QUOTES_THEM:
            continue
        found += _findings(rel, (REPO / rel).read_text(encoding="utf-8"))
    assert not found, "\n".join(found)


def test_the_patterns_catch_the_words_and_leave_pytest_sessions_alone():
    bad = ["the eleventh session", "Twelfth session (2026-12-03)", "issue 28", "(issue 4)", "Issues 5 and 6",
           "(#12)", "the issue-28 trial", "branch issue28-x", "one device call", "the device tool's", 'carry: [".whl"]', "carry .whl/", "a lent machine",
           "run by another helper's tests", "KINDS.md", "nvidia-h200-x2", "/work/main", "reported to the lead",
           "other sessions' work"]
    good = ["a second pytest session", "the first session of the catalog", "issues a request", "carry an offset",
            "the session's nonce", "a helper process", "nvidia-smi", "a lead-in", "the 2-vCPU VM"]
    for text in bad:
        assert _findings("x", text), text
    for text in good:
        assert not _findings("x", text), text
