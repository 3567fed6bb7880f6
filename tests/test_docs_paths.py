"""Every docs page cited anywhere in the repository exists, with the section cited: ``docs/PAGE.md`` must be a file,
``docs/PAGE.md#anchor`` one of that page's headings (as MkDocs makes anchors), and ``docs/PAGE.md, "Title"`` must
name text that is on that page. Pages moved on 2026-12-05; ``python3 tools/relink_docs.py`` rewrites citations of
the old paths (a branch written against them, merged later). Every page is in the site's navigation."""

from __future__ import annotations

import re

import pytest
from docs_pages import CITATION, DOCS, RAW_DATA, REPO, anchors, pages, slugify, tracked_text_files

#: files that cite paths that are not pages on purpose: the relink script's table of old paths, and this test's and
#: its helper's descriptions of the citation forms
CITES_OLD_PATHS = {"tools/relink_docs.py", "tools/relink_moved_sections.json", "tests/test_docs_paths.py",
                   "tests/docs_pages.py"}
#: under docs/data only the notes written by hand are the project's prose (the rest is machine output)
DATA_NOTES = ("README.md", "SUMMARY.md")


def _citations():
    for rel in tracked_text_files():
        if rel in CITES_OLD_PATHS or (rel.startswith(RAW_DATA) and rel.rsplit("/", 1)[-1] not in DATA_NOTES):
            continue
        text = (REPO / rel).read_text(encoding="utf-8")
        for m in CITATION.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            yield rel, line, m.group(1), m.group(2), m.group(3)


def test_every_cited_docs_page_and_anchor_exists():
    missing = []
    for rel, line, path, anchor, title in _citations():
        target = REPO / path
        where = f"{rel}:{line}: {path}{anchor or ''}"
        if not target.is_file():
            missing.append(f"{where}: no such page (moved? python3 tools/relink_docs.py rewrites the old paths)")
            continue
        if anchor and anchor[1:] not in anchors(target):
            missing.append(f"{where}: {path} has no heading with that anchor")
        if title is not None:
            wanted = " ".join(re.sub(r"\n\s*(#|//)", " ", title).split()).lower()
            text = " ".join(target.read_text(encoding="utf-8").split()).lower()
            if wanted not in text and slugify(wanted) not in anchors(target):
                missing.append(f"{where}, \"{title}\": that text is not on {path}")
    assert not missing, "\n".join(missing)


def test_relative_links_between_pages_resolve():
    """Links between pages (MkDocs --strict checks them too; this says which file and line without a build)."""
    bad = []
    for page in pages():
        text = page.read_text(encoding="utf-8")
        for m in re.finditer(r"\]\(([^)\s]+?\.md)(#[\w-]+)?\)", text):
            link, anchor = m.group(1), m.group(2)
            if re.match(r"[a-z]+://", link):
                continue
            target = (page.parent / link).resolve()
            line = text.count("\n", 0, m.start()) + 1
            where = f"{page.relative_to(REPO)}:{line}: ({link}{anchor or ''})"
            if not target.is_file():
                bad.append(f"{where}: no such page")
            elif anchor and anchor[1:] not in anchors(target):
                bad.append(f"{where}: no such heading on {target.relative_to(REPO)}")
    assert not bad, "\n".join(bad)


def _nav_pages(node) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, list):
        return [p for n in node for p in _nav_pages(n)]
    if isinstance(node, dict):
        return [p for v in node.values() for p in _nav_pages(v)]
    return []


def test_every_page_is_in_the_navigation():
    yaml = pytest.importorskip("yaml")
    nav = yaml.safe_load((REPO / "mkdocs.yml").read_text())["nav"]
    in_nav = set(_nav_pages(nav))
    on_disk = {p.relative_to(DOCS).as_posix() for p in pages()}
    assert not on_disk - in_nav, f"pages not reachable from mkdocs.yml's nav: {sorted(on_disk - in_nav)}"
    assert not in_nav - on_disk, f"nav entries without a page: {sorted(in_nav - on_disk)}"
