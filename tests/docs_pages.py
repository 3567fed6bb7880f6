"""What the docs tests read: the repository's tracked text files, the docs pages' headings and their anchors as
MkDocs makes them (Python-Markdown's toc), and the citations ``docs/....md[#anchor]`` in any file."""

from __future__ import annotations

import html
import re
import subprocess
import unicodedata
from functools import lru_cache
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"
#: raw measurement output (reports, logs, data summaries): machine-written, not the project's prose
RAW_DATA = "docs/data/"

CITATION = re.compile(r"(?<![\w/.-])(docs/[\w./-]+?\.md)(#[\w-]+)?"
                      r"(?:(?:,[ \t]*\n?[ \t]*(?:#|//)?[ \t]*|[ \t]+)\"([^\"\n]{1,80}(?:\n[^\"\n]{1,80})?)\")?")


@lru_cache(maxsize=1)
def tracked_text_files() -> tuple[str, ...]:
    """Every file git tracks that reads as UTF-8 text (relative paths)."""
    out = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    files = []
    for raw in out.split(b"\0"):
        rel = raw.decode()
        p = REPO / rel
        if not rel or not p.is_file() or p.is_symlink():
            continue
        data = p.read_bytes()
        if b"\0" in data[:4096]:
            continue
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            continue
        files.append(rel)
    return tuple(files)


def slugify(text: str) -> str:
    """A heading's anchor as Python-Markdown's toc extension makes it (MkDocs' default)."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link: its text
    text = html.unescape(text.replace("`", "").replace("*", ""))
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def headings(page: Path) -> list[str]:
    """A page's Markdown headings (outside fenced code blocks)."""
    out, fenced = [], False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        m = re.match(r"^#{1,6} (.+?)\s*#*\s*$", line)
        if m and not fenced:
            out.append(m.group(1))
    return out


@lru_cache(maxsize=None)
def anchors(page: Path) -> frozenset[str]:
    """The anchors MkDocs gives a page's headings (a repeated one gets _1, _2, ...)."""
    seen: dict[str, int] = {}
    out = set()
    for h in headings(page):
        s = slugify(h)
        if s in seen:
            seen[s] += 1
            s = f"{s}_{seen[s]}"
        else:
            seen[s] = 0
        out.add(s)
    return frozenset(out)


def pages() -> list[Path]:
    """The docs pages (not the raw data)."""
    return sorted(p for p in DOCS.rglob("*.md") if not p.relative_to(REPO).as_posix().startswith(RAW_DATA))


def _masked(text: str) -> str:
    """``text`` with code spans and parenthesised asides blanked to the same length (their dots end no sentence)."""
    text = re.sub(r"`[^`]*`", lambda m: "`" + "x" * (len(m.group(0)) - 2) + "`", text)
    return re.sub(r"\([^()]*\)", lambda m: "(" + "x" * (len(m.group(0)) - 2) + ")", text)


def prose(page: Path) -> tuple[list[str], list[str]]:
    """(sentences, table cells) of a page's prose: paragraphs and list items outside fenced code, headings and HTML,
    split into sentences at a full stop, semicolon, question or exclamation mark followed by a new sentence."""
    paragraphs: list[str] = []
    cells: list[str] = []
    current: list[str] = []
    fenced = False

    def close() -> None:
        if current:
            paragraphs.append(" ".join(current))
            current.clear()

    for line in page.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            close()
            continue
        if fenced:
            continue
        if line.startswith("|"):
            close()
            if not re.match(r"^\|(\s*:?-+:?\s*\|)+\s*$", line):
                cells += [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
            continue
        item = re.match(r"^\s*([-*]|\d+\.)\s+(.*)$", line)
        if not line.strip() or line.startswith(("#", "<")) or item:
            close()
            if item:
                current.append(item.group(2))
            continue
        current.append(line.strip())
    close()
    sentences = []
    for p in paragraphs:
        start = 0
        for m in re.finditer(r"[.;!?](?=\s+[A-Z(`*\[])", _masked(p)):
            sentences.append(p[start:m.end()].strip())
            start = m.end()
        sentences.append(p[start:].strip())
    return [s for s in sentences if s], cells
