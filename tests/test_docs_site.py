"""The docs site a reader gets: the guide's example candidates are files of the repository shown whole (the test
suite runs them: tests/test_examples_e2e.py); the pages that explain writing a candidate open with one; no sentence
or table cell of the guide and the reference is one a reader must scroll through; the guide gives no maintainer's
script budget and no fixed `--autotune-max-pairs` to copy; the built site leaves the raw data out and stays small."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from docs_pages import DOCS, REPO, prose

GUIDE = DOCS / "guide"
REFERENCE = DOCS / "reference"
EXAMPLES = REPO / "examples"
#: the longest sentence or table cell of the guide and the reference, in characters (about five lines of the site)
MAX_CHARS = 500
#: the built site without the raw data, in bytes
MAX_SITE_BYTES = 5_000_000
#: the guide pages that explain writing a candidate, each opening with a whole example
CANDIDATE_PAGES = ("candidates.md", "compiled-candidates.md")
SNIPPET = re.compile(r'^--8<-- "([^"]+)"$', re.M)


def _included(page: str) -> list[str]:
    return SNIPPET.findall((GUIDE / page).read_text(encoding="utf-8"))


def test_every_example_file_is_shown_whole_in_the_guide() -> None:
    """Included by pymdownx.snippets (check_paths: a missing file fails the build), so page and file are one text."""
    yaml = pytest.importorskip("yaml")
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text())
    snippets = next((e["pymdownx.snippets"] for e in config["markdown_extensions"]
                     if isinstance(e, dict) and "pymdownx.snippets" in e), None)
    assert snippets and snippets.get("check_paths") is True and "." in snippets.get("base_path", [])
    shown = {path for page in GUIDE.glob("*.md") for path in _included(page.name)}
    files = {p.relative_to(REPO).as_posix() for p in EXAMPLES.rglob("*.py") if "__pycache__" not in p.parts}
    assert files and files <= shown, f"example files no guide page shows: {sorted(files - shown)}"
    assert all((REPO / p).is_file() for p in shown), f"included files that do not exist: {sorted(shown)}"


@pytest.mark.parametrize("page", CANDIDATE_PAGES)
def test_a_page_on_writing_candidates_opens_with_a_whole_example(page: str) -> None:
    text = (GUIDE / page).read_text(encoding="utf-8")
    first = re.search(r"^## (.+)$", text, flags=re.M)
    assert first and first.group(1) == "A whole example", f"{page}: its first section must be '## A whole example'"
    section = text[first.end():text.find("\n## ", first.end())]
    files = SNIPPET.findall(section)
    assert any("class ModelNew" in (REPO / f).read_text() for f in files), f"{page}: no whole ModelNew file included"


def test_the_compiled_candidates_page_shows_a_cpp_and_a_cuda_load_inline_candidate() -> None:
    texts = [(REPO / f).read_text() for f in _included("compiled-candidates.md")]
    assert any("load_inline" in t and "cpp_sources" in t and "cuda_sources" not in t for t in texts)
    assert any("load_inline" in t and "__global__" in t and "x.contiguous()" in t for t in texts)


@pytest.mark.parametrize("page", sorted(p.relative_to(DOCS).as_posix() for d in (GUIDE, REFERENCE) for p in d.glob("*.md")))
def test_no_sentence_or_table_cell_a_reader_must_scroll_through(page: str) -> None:
    sentences, cells = prose(DOCS / page)
    long = [f"sentence of {len(s)} characters: {s[:100]}..." for s in sentences if len(s) > MAX_CHARS]
    long += [f"table cell of {len(c)} characters: {c[:100]}..." for c in cells if len(c) > MAX_CHARS]
    assert not long, (f"docs/{page}: split these (a list, a second sentence, or a note below the table; "
                      f"at most {MAX_CHARS} characters):\n" + "\n".join(long))


def test_the_length_bound_sees_sentences_and_cells(tmp_path) -> None:
    page = tmp_path / "p.md"
    page.write_text("One `a.b` sentence (with e.g. an aside). Two; three.\n\n```\nnot. prose.\n```\n\n"
                    "- an item. Another.\n\n| a | b |\n|---|---|\n| x | y. z |\n")
    sentences, cells = prose(page)
    assert sentences == ["One `a.b` sentence (with e.g. an aside).", "Two; three.", "an item.", "Another."]
    assert cells == ["a", "b", "x", "y. z"]


def test_the_guide_names_no_maintainer_budget_and_no_fixed_max_pairs() -> None:
    bad = []
    for page in sorted(GUIDE.glob("*.md")):
        text = page.read_text(encoding="utf-8")
        for m in re.finditer(r"\bBUDGET=\d+", text):
            bad.append(f"{page.name}: {m.group(0)}: the GPU host's scripts are for maintainers (docs/maintainers.md)")
        for m in re.finditer(r"^\s*(?:python3? -m )?pytest\b.*--autotune-max-pairs=\d+.*$", text, flags=re.M):
            bad.append(f"{page.name}: {m.group(0).strip()}: write --autotune-max-pairs=N, the N the run prints")
    assert not bad, "\n".join(bad)


def test_the_built_site_leaves_the_raw_data_out_and_stays_small(tmp_path) -> None:
    pytest.importorskip("mkdocs")
    pytest.importorskip("material")
    site = tmp_path / "site"
    res = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", str(site)],
                         cwd=REPO, capture_output=True, text=True, env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"},
                         timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    assert not (site / "data").exists(), "docs/data is copied into the site: exclude it in mkdocs.yml (exclude_docs)"
    size = sum(p.stat().st_size for p in site.rglob("*") if p.is_file())
    assert size < MAX_SITE_BYTES, f"the site is {size / 1e6:.1f} MB (the bound: {MAX_SITE_BYTES / 1e6:.0f} MB)"
