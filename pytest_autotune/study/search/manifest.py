"""The manifest ``autotune search`` writes beside the candidates it generated: which candidate is which
iteration of which arm, from which template and point. The plugin reads it (``--study-manifest=PATH``) to give
each item its iteration, and refuses a candidate whose bytes changed since it was generated."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from ...errors import AutotuneUsageError

MANIFEST_SCHEMA = "pytest-autotune/search-manifest/1"
MANIFEST_NAME = "manifest.json"


@dataclass(frozen=True)
class ManifestEntry:
    problem: str
    name: str
    iteration: int
    sha256: str
    path: str  # relative to the manifest's folder
    params: dict
    unusable: Optional[str] = None  # why the iteration produced nothing to measure (recorded as gate "reply")
    kind: str = "kernel"  # "engine" for an engine configuration (problem = "<engine>:<workload>")


@dataclass(frozen=True)
class Manifest:
    path: Path
    study: str
    arm: str
    tuner: str
    seed: Optional[int]
    entries: tuple[ManifestEntry, ...]
    data: dict

    @property
    def unusable(self) -> tuple[ManifestEntry, ...]:
        return tuple(e for e in self.entries if e.unusable is not None)

    def lookup(self, problem: str, candidate: str) -> Optional[ManifestEntry]:
        for e in self.entries:
            if e.problem == problem and e.name == candidate:
                return e
        return None

    def check_files(self) -> None:
        """Every generated candidate still has the bytes the manifest names."""
        for e in self.entries:
            f = self.path.parent / e.path
            try:
                digest = hashlib.sha256(f.read_bytes()).hexdigest()
            except OSError:
                raise AutotuneUsageError(f"{self.path}: candidate {e.path} is missing; rerun autotune search") from None
            if digest != e.sha256:
                raise AutotuneUsageError(
                    f"{f} changed since autotune search generated it (sha256 {digest[:12]}..., manifest "
                    f"{e.sha256[:12]}...): a search iteration is the generated file; regenerate it or measure the "
                    "edited file as another arm")


def write_manifest(path: Path, data: dict[str, Any]) -> None:
    data = {"schema": MANIFEST_SCHEMA, **data}
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def load_manifest(path: Path) -> Manifest:
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise AutotuneUsageError(f"--study-manifest={path}: cannot read it ({e}); pass the manifest.json that "
                                 "autotune search wrote") from None
    if not isinstance(data, dict) or data.get("schema") != MANIFEST_SCHEMA:
        raise AutotuneUsageError(f"{path} is not an autotune search manifest (schema {MANIFEST_SCHEMA})")
    try:
        entries = tuple(ManifestEntry(str(c["problem"]), str(c["name"]), int(c["iteration"]), str(c["sha256"]),
                                      str(c["path"]), dict(c.get("params") or {}),
                                      str(c["unusable"]) if c.get("unusable") is not None else None,
                                      str(c.get("kind", "kernel"))) for c in data["candidates"])
        return Manifest(path.resolve(), str(data["study"]), str(data["arm"]), str(data.get("tuner", "?")),
                        data.get("seed"), entries, data)
    except (KeyError, TypeError, ValueError) as e:
        raise AutotuneUsageError(f"{path}: malformed manifest ({e!r}); rerun autotune search") from None
