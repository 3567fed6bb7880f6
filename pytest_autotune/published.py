"""Numbers published for a candidate elsewhere, beside what this session measured (docs/reference/report.md,
``details.published``): the manifest ``autotune import`` writes (importers/output.py) names, per candidate file
(its problem and its sha256), the speedup its source published, the GPU it was measured on, the model and the
source. The plugin reads every manifest found beside a ``--candidates`` folder (``published.json`` in it or in its
parent) and each ``--autotune-published=MANIFEST``, and each item whose candidate's bytes are a manifest's gets its
entry in its details. They are shown, never used: no gate, no statistic and no bar reads them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Optional, TypeVar

import pytest

from .keys import SESSION_KEY

if TYPE_CHECKING:  # pragma: no cover
    from .problems.model import KernelItemSpec

MANIFEST = "published.json"
V = TypeVar("V")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("autotune").addoption(
        "--autotune-published", dest="autotune_published", action="append", default=[], metavar="MANIFEST",
        help="a manifest of published numbers (autotune import writes DIR/published.json): each item whose candidate "
             "it lists gets them in details.published. Manifests beside --candidates folders are read without it.")


class PublishedIndex:
    """(problem, candidate sha256) -> what was published for it."""

    def __init__(self) -> None:
        self.entries: dict[tuple[str, str], dict] = {}
        self.manifests: list[str] = []

    def add(self, path: Path) -> None:
        """Read one manifest; ValueError naming the file when it is not one."""
        try:
            data = json.loads(path.read_text())
            cands = data["candidates"]
            for c in cands:
                entry = {**dict(c.get("published") or {}), "model": c.get("model"), "source_id": c.get("source_id"),
                         "imported_as": c.get("name"), "manifest": str(path)}
                self.entries[(str(c["problem"]), str(c["sha256"]))] = {k: v for k, v in entry.items() if v is not None}
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            raise ValueError(f"{path} is not a manifest of published numbers ({type(e).__name__}: {e}); write it with "
                             "autotune import, or drop --autotune-published") from None
        self.manifests.append(str(path))

    def lookup(self, problem: str, sha256: Optional[str]) -> Optional[dict]:
        return self.entries.get((problem, sha256)) if sha256 else None


_KEY = pytest.StashKey[PublishedIndex]()


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    session = config.stash.get(SESSION_KEY, None)
    idx = PublishedIndex()
    for given in config.getoption("autotune_published", None) or []:
        try:
            idx.add(Path(given).expanduser())
        except ValueError as e:
            raise pytest.UsageError(f"--autotune-published: {e}") from None
    for d in (session.opts.candidates if session is not None else []):
        for path in (Path(d) / MANIFEST, Path(d).parent / MANIFEST):
            if path.is_file() and str(path) not in idx.manifests:
                try:
                    idx.add(path)
                except ValueError:
                    pass  # a file of that name that is something else: nothing published to show
    if idx.entries:
        config.stash[_KEY] = idx


def attach(config: pytest.Config, verdict: V, spec: "KernelItemSpec") -> V:
    """``verdict`` with its candidate's published numbers in ``details.published``, where a manifest lists them."""
    idx = config.stash.get(_KEY, None)
    outcome = getattr(verdict, "outcome", None)
    if idx is None or outcome is None:
        return verdict
    sha = outcome.details.get("candidate_sha256")
    if sha is None and spec.candidate.path is not None:
        from .problems.model import SourceFile

        try:
            sha = SourceFile.read(spec.candidate.path).sha256
        except OSError:
            return verdict
    entry = idx.lookup(spec.problem.name, sha)
    if entry is not None:
        outcome.details["published"] = entry
    return verdict
