"""``autotune study report NAME``: a study's verdict from the store, its registry entry as it reads now, and its
arms' call logs; recorded in ``study_verdicts`` (docs/guide/studies.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Mapping, Optional

from ..protocol import Protocol
from ..result import canonical_json
from ..store.db import ResultStore
from ..store.studies import record_verdict, registration, study_rows
from .attempts import attempts_from_rows
from .audit import AuditReport, audit_file
from .registry import STUDY_REGISTRY, STUDY_SECTION, RegistryError, StudyEntry, entry_sha256, read_entry
from .verdict import StudyReport, judge


def build_study_report(store: ResultStore, study: str, root: Path, protocol: Protocol,
                       calls: Optional[Mapping[str, Path]] = None, registry: Optional[str] = None) -> StudyReport:
    """The verdict of ``study``. The registry is the one the study's registration names (else ``registry``, else
    studies.toml), read from the working tree under ``root``; call logs come from the entry's ``calls`` (paths
    relative to ``root``), overridden by ``calls``."""
    reg = registration(store, study)
    registry_path = reg["registry"] if reg else (registry or STUDY_REGISTRY)
    entry: Optional[StudyEntry] = None
    digest: Optional[str] = None
    problem: Optional[str] = None
    try:
        _, raw = read_entry(root, registry_path, STUDY_SECTION, study)
    except RegistryError as e:
        raw, problem = None, f"its registry cannot be read: {e}"
    if raw is not None:
        digest = entry_sha256(raw)
        try:
            entry = StudyEntry.parse(study, raw, registry_path)
        except RegistryError as e:
            problem = f"its registry entry is not usable: {e}"
    rows = study_rows(store, study)
    attempts = attempts_from_rows(rows["results"], rows["rejections"], rows["quarantine"])
    logs: dict[str, AuditReport] = {}
    paths = {arm: Path(root) / p for arm, p in (entry.calls if entry else {}).items()}
    paths.update({arm: Path(p) for arm, p in (calls or {}).items()})
    for arm, path in paths.items():
        logs[arm] = audit_file(path, protocol.studies)
    return judge(study, attempts, protocol, entry=entry, entry_sha256=digest, registration=reg, logs=logs,
                 entry_problem=problem)


def record(store: ResultStore, report: StudyReport, protocol: Protocol) -> int:
    """Record the verdict (the database refuses a non-exploratory verdict without a matching registered
    registration)."""
    body = report.to_json()
    body["protocol"] = {"version": protocol.version, "sha256": protocol.sha256}
    return record_verdict(store, {
        "study": report.study, "verdict": report.verdict, "label": report.label,
        "exploratory": int(report.exploratory), "plumbing_suspect": int(report.plumbing_suspect),
        "registration_id": report.registration["id"] if report.registration else None,
        "entry_sha256": report.entry_sha256, "report": canonical_json(body),
    })
