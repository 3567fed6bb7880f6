"""The modification surface: what a candidate author may change since a base commit.

``--autotune-base=REF`` asks git which files differ between REF and the working tree (committed, staged,
unstaged and untracked-but-not-ignored). Every one of them must match a glob of ``[surface].modifiable``;
anything else (gates, protocol.toml, problems, baselines, conftest.py, the plugin itself) makes the run refuse
to record, naming the files.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Sequence


class SurfaceError(Exception):
    pass


@lru_cache(maxsize=256)
def glob_regex(pattern: str) -> "re.Pattern[str]":
    """``**`` spans directories, ``*`` and ``?`` stay inside one path segment."""
    out = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif c == "*":
            out.append("[^/]*")
            i += 1
        elif c == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(c))
            i += 1
    return re.compile("^" + "".join(out) + "$")


def matches(path: str, globs: Sequence[str]) -> bool:
    return any(glob_regex(g).match(path) for g in globs)


def _git(root: Path, *args: str) -> str:
    try:
        p = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as e:
        raise SurfaceError(f"git is not usable here ({e}); --autotune-base needs a git checkout") from None
    if p.returncode != 0:
        raise SurfaceError(p.stderr.strip() or f"git {' '.join(args)} failed")
    return p.stdout


@dataclass(frozen=True)
class SurfaceReport:
    base: str
    base_sha: str
    changed: tuple[str, ...]
    outside: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.outside


def check_surface(root: Path, base: str, globs: Sequence[str]) -> SurfaceReport:
    top = Path(_git(root, "rev-parse", "--show-toplevel").strip())
    try:
        base_sha = _git(top, "rev-parse", "--verify", f"{base}^{{commit}}").strip()
    except SurfaceError:
        raise SurfaceError(f"--autotune-base={base}: no such commit in {top}; give a branch, tag or sha") from None
    changed = set(_git(top, "diff", "--name-only", "--no-renames", base_sha).split("\n"))
    changed |= set(_git(top, "ls-files", "--others", "--exclude-standard").split("\n"))
    changed.discard("")
    # globs are relative to the pytest rootdir; paths from git are relative to the repository top
    try:
        prefix = Path(root).resolve().relative_to(top.resolve())
    except ValueError:
        prefix = Path(".")

    def rel(p: str) -> str:
        if str(prefix) in ("", "."):
            return p
        pp = Path(p)
        try:
            return pp.relative_to(prefix).as_posix()
        except ValueError:
            return "../" * len(prefix.parts) + p

    files = sorted(changed)
    outside = tuple(p for p in files if not matches(rel(p), globs))
    return SurfaceReport(base, base_sha, tuple(files), outside)
