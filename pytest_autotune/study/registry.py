"""Pre-registration: registry files (``studies.toml``, ``anchors.toml``) and the git check of an entry.

A study's comparison is written down before its first result: hypothesis, arms, metric, direction, usability
bar, success bar and pairs (docs/guide/studies.md). What the check finds when the study's first row is recorded goes
into the store (``study_registrations``, docs/reference/store.md): ``registered`` when the entry is committed in HEAD and
the working tree holds the same entry, ``uncommitted`` when it exists but is not committed (or differs from
HEAD's), ``unregistered`` when there is none. Entries are compared by the digest of their canonical JSON, so
reformatting or comments are not edits, and any changed value is.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Mapping, Optional

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from ..errors import AutotuneUsageError
from ..result import canonical_json

STUDY_REGISTRY = "studies.toml"
STUDY_SECTION = "study"
ANCHOR_SECTION = "anchor"

Status = Literal["registered", "uncommitted", "unregistered"]
Direction = Literal["higher", "lower"]
METRICS = ("best_speedup",)
DIRECTIONS = ("higher", "lower")


class RegistryError(AutotuneUsageError):
    """A registry file or entry that cannot be used (the message names the key and the fix)."""


def entry_sha256(entry: Mapping[str, Any]) -> str:
    """Digest of an entry's canonical JSON: what "unchanged" means for a registration."""
    return hashlib.sha256(canonical_json(_plain(entry)).encode("utf-8")).hexdigest()


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "isoformat"):  # TOML dates
        return value.isoformat()
    return value


def parse_registry(text: str, source: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise RegistryError(f"{source} is not valid TOML: {e}; fix the syntax at the position given") from None


def entry_of(data: Mapping[str, Any], section: str, name: str) -> Optional[dict[str, Any]]:
    table = data.get(section)
    if not isinstance(table, Mapping):
        return None
    entry = table.get(name)
    return _plain(entry) if isinstance(entry, Mapping) else None


# ---------------------------------------------------------------------------------------------- study entries


@dataclass(frozen=True)
class StudyEntry:
    """A registered comparison of two arms (treatment first)."""

    name: str
    hypothesis: str
    arms: tuple[str, str]
    metric: str
    direction: Direction
    min_usable: Mapping[str, int]
    success_bar: float
    pairs: int
    problems: Optional[tuple[str, ...]] = None
    iterations: Optional[int] = None
    markers: Mapping[str, str] = field(default_factory=dict)
    calls: Mapping[str, str] = field(default_factory=dict)

    @property
    def treatment(self) -> str:
        return self.arms[0]

    @property
    def control(self) -> str:
        return self.arms[1]

    @classmethod
    def parse(cls, name: str, raw: Mapping[str, Any], source: str) -> "StudyEntry":
        where = f"{source}: [study.{name}]"
        known = {"hypothesis", "arms", "metric", "direction", "min_usable", "success_bar", "pairs", "problems",
                 "iterations", "markers", "calls"}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise RegistryError(f"{where}: unknown key {unknown[0]!r}; known keys: {', '.join(sorted(known))}")
        for key in ("hypothesis", "arms", "metric", "direction", "min_usable", "success_bar", "pairs"):
            if key not in raw:
                raise RegistryError(f"{where}: missing key {key!r}; a registration states hypothesis, arms, metric, "
                                    "direction, min_usable, success_bar and pairs (docs/guide/studies.md)")
        hyp = raw["hypothesis"]
        if not isinstance(hyp, str) or len(hyp.strip()) < 10:
            raise RegistryError(f"{where}: hypothesis must say in words what is expected (at least 10 characters)")
        arms = raw["arms"]
        if (not isinstance(arms, list) or len(arms) != 2 or not all(isinstance(a, str) and a for a in arms)
                or arms[0] == arms[1]):
            raise RegistryError(f"{where}: arms must be two different names, treatment first: arms = [\"agent\", "
                                "\"random\"]")
        metric = raw["metric"]
        if metric not in METRICS:
            raise RegistryError(f"{where}: metric {metric!r} is not supported; use one of {', '.join(METRICS)}")
        direction = raw["direction"]
        if direction not in DIRECTIONS:
            raise RegistryError(f"{where}: direction must be \"higher\" (the treatment's metric is higher than the "
                                "control's) or \"lower\"")
        mu = raw["min_usable"]
        if isinstance(mu, int) and not isinstance(mu, bool):
            min_usable = {a: mu for a in arms}
        elif isinstance(mu, Mapping) and set(mu) == set(arms) and all(
                isinstance(v, int) and not isinstance(v, bool) for v in mu.values()):
            min_usable = {a: int(mu[a]) for a in arms}
        else:
            raise RegistryError(f"{where}: min_usable must be an integer, or a table with one integer per arm "
                                f"({', '.join(arms)})")
        if any(v < 1 for v in min_usable.values()):
            raise RegistryError(f"{where}: min_usable must be at least 1 per arm")
        bar = raw["success_bar"]
        if isinstance(bar, bool) or not isinstance(bar, (int, float)) or not bar >= 1.0:
            raise RegistryError(f"{where}: success_bar must be a ratio >= 1.0 (treatment over control in the "
                                "registered direction), e.g. 1.10")
        pairs = raw["pairs"]
        if isinstance(pairs, bool) or not isinstance(pairs, int) or pairs < 1:
            raise RegistryError(f"{where}: pairs must be the number of problems both arms are compared on (>= 1)")
        problems = raw.get("problems")
        if problems is not None:
            if not isinstance(problems, list) or not all(isinstance(p, str) and p for p in problems):
                raise RegistryError(f"{where}: problems must be a list of problem names (file stems)")
            if len(problems) != pairs:
                raise RegistryError(f"{where}: problems lists {len(problems)} problem(s) but pairs = {pairs}")
        iterations = raw.get("iterations")
        if iterations is not None and (isinstance(iterations, bool) or not isinstance(iterations, int)
                                       or iterations < 1):
            raise RegistryError(f"{where}: iterations (the planned iterations per arm) must be an integer >= 1")
        markers = raw.get("markers") or {}
        calls = raw.get("calls") or {}
        for key, table in (("markers", markers), ("calls", calls)):
            if not isinstance(table, Mapping) or not set(table) <= set(arms) or not all(
                    isinstance(v, str) and v for v in table.values()):
                raise RegistryError(f"{where}: {key} must be a table of non-empty strings keyed by arm name")
        return cls(name=name, hypothesis=hyp.strip(), arms=(arms[0], arms[1]), metric=metric,
                   direction=direction, min_usable=min_usable, success_bar=float(bar), pairs=pairs,
                   problems=tuple(problems) if problems is not None else None, iterations=iterations,
                   markers=dict(markers), calls=dict(calls))


# ---------------------------------------------------------------------------------------------- the git check


@dataclass(frozen=True)
class RegistrationCheck:
    """What the pre-registration check found for one entry (the ``study_registrations`` row, less run and MAC)."""

    study: str
    status: Status
    registry: str  # relative to the rootdir
    entry: Optional[dict]
    entry_sha256: Optional[str]
    git_commit: Optional[str]
    detail: str

    @property
    def registered(self) -> bool:
        return self.status == "registered"

    def as_row(self, run_id: str) -> dict[str, Any]:
        return {"run_id": run_id, "study": self.study, "status": self.status, "registry": self.registry,
                "entry": canonical_json(self.entry) if self.entry is not None else None,
                "entry_sha256": self.entry_sha256, "git_commit": self.git_commit, "detail": self.detail}


def _git(cwd: Path, *args: str) -> Optional[str]:
    try:
        p = subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return p.stdout if p.returncode == 0 else None


def read_entry(root: Path, registry: str, section: str, name: str) -> tuple[bool, Optional[dict]]:
    """(file exists, the working tree's entry or None)."""
    path = Path(root) / registry
    if not path.is_file():
        return False, None
    return True, entry_of(parse_registry(path.read_text(encoding="utf-8"), str(path)), section, name)


def check_registration(root: Path, registry: str, section: str, name: str, *, study: Optional[str] = None
                       ) -> RegistrationCheck:
    """Is ``[section.name]`` of ``root/registry`` committed in HEAD and unchanged in the working tree?"""
    study = study or name
    exists, entry = read_entry(root, registry, section, name)
    label = f"[{section}.{name}] in {registry}"
    if not exists:
        return RegistrationCheck(study, "unregistered", registry, None, None, None,
                                 f"no registry file {registry}: the study was not registered before its first result")
    if entry is None:
        return RegistrationCheck(study, "unregistered", registry, None, None, None,
                                 f"{registry} has no entry [{section}.{name}]: the study was not registered before "
                                 "its first result")
    digest = entry_sha256(entry)
    path = (Path(root) / registry).resolve()
    where = path.parent  # the repository that holds the registry file (usually the rootdir's)
    top = _git(where, "rev-parse", "--show-toplevel")
    head = _git(where, "rev-parse", "--verify", "HEAD^{commit}")
    if top is None or head is None:
        return RegistrationCheck(study, "uncommitted", registry, entry, digest, None,
                                 f"{label} exists but {where} is not in a git checkout with a commit, so nothing "
                                 "shows it was written before the first result; commit it first")
    try:
        rel = path.relative_to(Path(top.strip()).resolve()).as_posix()
    except ValueError:
        rel = registry
    committed_text = _git(where, "show", f"{head.strip()}:{rel}")
    committed = None
    if committed_text is not None:
        try:
            committed = entry_of(parse_registry(committed_text, f"{rel} at HEAD"), section, name)
        except RegistryError:
            committed = None
    if committed is None:
        return RegistrationCheck(study, "uncommitted", registry, entry, digest, None,
                                 f"{label} is not committed (HEAD {head.strip()[:12]} does not hold it): commit the "
                                 "registry before the study's first result")
    if entry_sha256(committed) != digest:
        return RegistrationCheck(study, "uncommitted", registry, entry, digest, None,
                                 f"{label} differs from the one committed in HEAD {head.strip()[:12]}: commit the "
                                 "change before the study's first result")
    return RegistrationCheck(study, "registered", registry, entry, digest, head.strip(),
                             f"{label} committed in {head.strip()[:12]} before the study's first result")
