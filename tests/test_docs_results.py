"""The results pages lead with what holds now (docs/results/index.md, docs/maintainers.md "The docs"): a page with a
``## Current`` section has it first; each device page opens with its current table, whose every row gives the
date and commit, the command and raw data that exists in the repository; each day's measurements live on a dated
page (``results/<device>-<YYYY-MM-DD>.md``) that its device page's History lists, newest first."""

from __future__ import annotations

import re

import pytest
from docs_pages import DOCS, REPO

RESULTS = DOCS / "results"
#: the pages of the machines measured; each has dated pages of its history beside it
DEVICE_PAGES = ("cpu.md", "h200.md")
DATED = re.compile(r"^(?P<device>[a-z0-9]+)-(?P<date>\d{4}-\d{2}-\d{2})\.md$")


def _h2(text: str) -> list[tuple[int, str]]:
    out, fenced = [], False
    for i, line in enumerate(text.splitlines()):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("## "):
            out.append((i, line[3:].strip()))
    return out


def _first_table(text: str) -> tuple[int, list[list[str]]]:
    """(line of its header, rows of cells) of the page's first Markdown table."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("|") and i + 1 < len(lines) and re.match(r"^\|(\s*:?-+:?\s*\|)+\s*$", lines[i + 1]):
            rows = []
            for row in lines[i:]:
                if not row.startswith("|"):
                    break
                rows.append([c.strip() for c in re.split(r"(?<!\\)\|", row.strip())[1:-1]])
            return i, [rows[0]] + rows[2:]
    raise AssertionError("no table")


def _section(text: str, title: str) -> str:
    lines = text.splitlines()
    h2 = _h2(text)
    for k, (i, t) in enumerate(h2):
        if t == title:
            end = h2[k + 1][0] if k + 1 < len(h2) else len(lines)
            return "\n".join(lines[i:end])
    raise AssertionError(f"no '## {title}'")


@pytest.mark.parametrize("page", sorted(p.name for p in RESULTS.glob("*.md") if not DATED.match(p.name)))
def test_a_current_section_comes_first(page: str) -> None:
    h2 = [t for _, t in _h2((RESULTS / page).read_text(encoding="utf-8"))]
    if page in DEVICE_PAGES or page == "index.md":
        assert h2 and h2[0] == "Current", f"docs/results/{page}: its first section must be '## Current', not {h2[:1]}"
    elif any(t.startswith("Current") for t in h2):
        assert h2[0].startswith("Current"), f"docs/results/{page}: '## Current' must come before {h2[0]!r}"


@pytest.mark.parametrize("page", DEVICE_PAGES)
def test_a_device_page_opens_with_its_current_table(page: str) -> None:
    text = (RESULTS / page).read_text(encoding="utf-8")
    at, table = _first_table(text)
    current = next(i for i, t in _h2(text) if t == "Current")
    later = [i for i, _ in _h2(text) if i > current]
    assert current < at < (later[0] if later else 10**9), f"{page}: its first table must be in '## Current'"
    header = [h.lower() for h in table[0]]
    col = {name: next((k for k, h in enumerate(header) if name in h), None)
           for name in ("what", "command", "date", "commit", "raw data")}
    assert all(v is not None for v in col.values()), f"{page}: the current table needs columns {list(col)}: {header}"
    assert len(table) > 1
    bad = []
    for row in table[1:]:
        what = row[col["what"]]  # type: ignore[index]
        if not re.search(r"\d{4}-\d{2}-\d{2}", row[col["date"]]):  # type: ignore[index]
            bad.append(f"{what}: no date")
        if not re.search(r"\b[0-9a-f]{7}\b", row[col["commit"]]):  # type: ignore[index]
            bad.append(f"{what}: no commit")
        if "`" not in row[col["command"]]:  # type: ignore[index]
            bad.append(f"{what}: no command")
        raw = re.findall(r"`(docs/data/[^`]+)`", row[col["raw data"]])  # type: ignore[index]
        if not raw:
            bad.append(f"{what}: no raw data path")
        bad += [f"{what}: {p} is not in the repository" for p in raw if not (REPO / p.rstrip("/")).exists()]
    assert not bad, f"docs/results/{page}, the current table:\n" + "\n".join(bad)


@pytest.mark.parametrize("page", DEVICE_PAGES)
def test_each_day_has_a_page_that_the_history_lists_newest_first(page: str) -> None:
    device = page[:-3]
    dated = sorted((p.name for p in RESULTS.glob(f"{device}-*.md") if DATED.match(p.name)), reverse=True)
    assert dated, f"no dated pages for {page}"
    history = _section((RESULTS / page).read_text(encoding="utf-8"), "History")
    listed = re.findall(rf"\]\(({re.escape(device)}-\d{{4}}-\d{{2}}-\d{{2}}\.md)\)", history)
    assert listed == dated, f"{page}'s History must link every dated page, newest first: {listed} against {dated}"
    for name in dated:
        text = (RESULTS / name).read_text(encoding="utf-8")
        date = DATED.match(name).group("date")  # type: ignore[union-attr]
        assert text.startswith("# ") and date in text.splitlines()[0], f"{name}: its title names its day"
        assert f"]({page}#current)" in text, f"{name}: links back to {page}'s current table"
        headings = [t for _, t in _h2(text) if t != "At a glance"]
        assert headings and all(date in t for t in headings), f"{name}: every section of the page is of {date}"


def test_the_site_leaves_the_raw_data_out() -> None:
    yaml = pytest.importorskip("yaml")
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text())
    excluded = [line.strip() for line in str(config.get("exclude_docs", "")).splitlines()]
    assert "data/" in excluded, "mkdocs.yml: exclude_docs must hold data/ (the raw data stays in the repository)"


def test_a_dated_section_lives_on_its_days_page() -> None:
    """A device page holds what is current; a section written on a day goes on that day's page."""
    for page in DEVICE_PAGES:
        text = (RESULTS / page).read_text(encoding="utf-8")
        for heading in re.findall(r"^#{2,4} (.+)$", text, flags=re.M):
            assert not re.search(r"\(\d{4}-\d{2}-\d{2}", heading), f"{page}: a dated section belongs on its day's page"
