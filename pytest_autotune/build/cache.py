"""The build cache (docs/guide/compiled-candidates.md, "What is cached"): one folder per key under the store's
folder (``.autotune/build/<key>/``), written only by the controller, from the bytes a build sandbox sent it.

An entry is ``manifest.json`` (what was built: each loader call and its object, Triton's cache root, the compiler,
the flags, the build's seconds, and every file's sha256 and size) and ``files/<path>``. It appears whole or not at
all (written beside, then renamed into place). Reading it verifies every file against the manifest: an entry whose
files do not match is not used (and is rebuilt). The folder is out of every sandbox's sight like the store; a
sandbox gets an entry's bytes in its init message, from the controller (sandbox/child_build.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

MANIFEST = "manifest.json"
FILES = "files"


def safe_relative(rel: str) -> Path:
    """A relative path that stays inside its folder, or ValueError."""
    p = Path(rel)
    if p.is_absolute() or not rel or any(part in ("", ".", "..") for part in rel.split("/")):
        raise ValueError(f"a built file's path is not a plain relative path: {rel!r}")
    return p


def build_root(db: Path) -> Path:
    """The cache's folder: ``build/`` in the store's folder (``.autotune/build`` for the default store), or
    ``<database>.build`` beside a database elsewhere (a folder the user chose may hold anything)."""
    db = db.resolve()
    if db.parent.name == ".autotune":
        return db.parent / "build"
    return db.with_name(db.name + ".build")


class CacheError(Exception):
    """An entry that cannot be used (unreadable, or its files do not match its manifest)."""


@dataclass(frozen=True)
class BuildEntry:
    key: str
    manifest: dict
    files: dict[str, bytes]

    def payload(self) -> dict[str, Any]:
        """What a candidate sandbox of the item gets in its init message (never a baseline's)."""
        import torch

        return {"key": self.key, "calls": self.manifest.get("calls", []),
                "triton_root": self.manifest.get("triton_root"),
                "files": {rel: torch.frombuffer(bytearray(data), dtype=torch.uint8) if data
                          else torch.empty(0, dtype=torch.uint8) for rel, data in self.files.items()}}


class BuildCache:
    def __init__(self, root: Path) -> None:
        self.root = root

    def load(self, key: str) -> Optional[BuildEntry]:
        """The entry of ``key``, verified; None when there is none. :class:`CacheError` when it cannot be used."""
        folder = self.root / key
        if not (folder / MANIFEST).is_file():
            return None
        try:
            manifest = json.loads((folder / MANIFEST).read_text())
            files = {}
            for rel, meta in dict(manifest.get("files") or {}).items():
                data = (folder / FILES / safe_relative(rel)).read_bytes()
                if len(data) != meta.get("bytes") or hashlib.sha256(data).hexdigest() != meta.get("sha256"):
                    raise CacheError(f"{rel}: its bytes do not match the manifest's sha256")
                files[rel] = data
        except (OSError, ValueError, AttributeError) as e:
            raise CacheError(f"{folder}: {e}") from None
        if manifest.get("key") != key:
            raise CacheError(f"{folder}: its manifest names key {manifest.get('key')!r}")
        return BuildEntry(key, manifest, files)

    def store(self, key: str, manifest: dict, files: dict[str, bytes]) -> BuildEntry:
        """Write an entry (from the controller's own digests of ``files``) and return it (ours: where another
        worker's valid entry landed first, that one stays on disk and is the same build)."""
        manifest = {**manifest, "key": key, "files": {rel: {"sha256": hashlib.sha256(data).hexdigest(),
                                                            "bytes": len(data)} for rel, data in files.items()}}
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = self.root / f".tmp-{uuid.uuid4().hex}"
        try:
            tmp.mkdir()  # an entry may have no files (a candidate that names a compiling API and builds nothing)
            for rel, data in files.items():
                path = tmp / FILES / safe_relative(rel)
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)
            (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True))
            final = self.root / key
            if final.exists():  # a broken entry, or another worker's that landed first: ours replaces a broken one
                try:
                    if self.load(key) is not None:
                        return BuildEntry(key, manifest, dict(files))
                except CacheError:
                    pass
                shutil.rmtree(final, ignore_errors=True)  # broken, or a folder without a manifest
            try:
                os.replace(tmp, final)
            except OSError:
                if not (final / MANIFEST).is_file():  # not another worker's entry landing meanwhile: a real error
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return BuildEntry(key, manifest, dict(files))
