"""Imported solutions written as a suite the plugin runs, with a manifest of what was published for each
(docs/reference/cli.md, ``autotune import``):

    DIR/problems/<stem>.py                      the problem files, byte for byte
    DIR/candidates/<stem>/cuda/<name>.py        a solution that names CUDA or Triton (run with --device=cuda)
    DIR/candidates/<stem>/<name>.py             any other solution, byte for byte
    DIR/published.json                          per candidate: the published numbers, the GPU, the model, the
                                                source's path and id, the file's sha256

``pytest --autotune --problems=DIR/problems --candidates=DIR/candidates`` runs them, and each item's JSON record
carries its candidate's published numbers (``details.published``, read from ``DIR/published.json``: published.py).
A sample is drawn by a seeded generator from the candidates sorted by name, never chosen by hand.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import random
from pathlib import Path
from typing import Optional

from .kernelbench import LayoutError, Solution

MANIFEST = "published.json"
SCHEMA = "pytest-autotune/published/1"


def gpu_only(source: bytes) -> bool:
    """A solution that names CUDA or Triton runs on a CUDA device only: it goes in ``cuda/`` (collected with
    ``--device=cuda``; docs/guide/candidates.md)."""
    low = source.lower()
    return b"cuda" in low or b"triton" in low


def named(solutions: list[Solution]) -> list[tuple[str, Solution]]:
    """Each solution's candidate name, unique within its problem (the long form where the short ones clash), sorted."""
    short: dict[tuple[str, str], int] = {}
    for s in solutions:
        short[(s.problem, s.name())] = short.get((s.problem, s.name()), 0) + 1
    out = [(s.name(long=short[(s.problem, s.name())] > 1), s) for s in solutions]
    return sorted(out, key=lambda t: (t[1].problem, t[0]))


def draw(items: list[tuple[str, Solution]], n: int, seed: int) -> list[tuple[str, Solution]]:
    """``n`` of ``items`` (sorted by problem and name) drawn by ``random.Random(seed)``, in that sorted order."""
    chosen = set(random.Random(seed).sample(range(len(items)), min(n, len(items))))
    return [t for i, t in enumerate(items) if i in chosen]


def write(out: Path, items: list[tuple[str, Solution]], source: dict, sample: Optional[dict],
          force: bool = False) -> dict:
    """Write the suite and its manifest; returns the manifest. Refuses a folder that already holds an import unless
    ``force`` (its files are replaced, others left alone)."""
    if (out / MANIFEST).exists() and not force:
        raise LayoutError(f"{out} already holds an import ({MANIFEST}): pass --force to replace it, or choose "
                          "another --out")
    problems: dict[str, dict] = {}
    candidates: list[dict] = []
    for name, s in items:
        data = s.problem_path.read_bytes()
        digest = hashlib.sha256(data).hexdigest()
        if s.problem in problems and problems[s.problem]["sha256"] != digest:
            raise LayoutError(f"two different files are named problem {s.problem}: {problems[s.problem]['source_path']}"
                              f" and {s.problem_path}")
        rel = Path("problems") / f"{s.problem}.py"
        _put(out / rel, data)
        problems[s.problem] = {"file": rel.as_posix(), "sha256": digest, "source_path": str(s.problem_path)}
        code = s.path.read_bytes()
        crel = Path("candidates") / s.problem / ("cuda" if gpu_only(code) else "") / f"{name}.py"
        _put(out / crel, code)
        candidates.append({"problem": s.problem, "name": name, "file": crel.as_posix(),
                           "sha256": hashlib.sha256(code).hexdigest(), "model": s.model, "source_id": s.source_id,
                           "source_path": str(s.path), "published": s.published})
    manifest = {"schema": SCHEMA, "created_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                "source": source, "sample": sample, "problems": problems, "candidates": candidates}
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return manifest


def _put(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
