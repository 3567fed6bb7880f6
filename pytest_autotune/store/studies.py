"""Study rows in the store (migration 0005_study, docs/reference/store.md): registrations, a study's rows, verdicts and
re-measure links. Writes go through :meth:`ResultStore.insert_row` (the database's validator); reads are plain
queries."""

from __future__ import annotations

from typing import Any, Optional

from .db import ResultStore

__all__ = ["record_registration", "registration", "study_names", "study_rows", "record_verdict", "verdicts",
           "remeasured_rows", "last_iteration", "study_results"]


def record_registration(store: ResultStore, row: dict[str, Any], *, nonce: bytes) -> int:
    """Insert a ``study_registrations`` row (MACed with the run's nonce). Raises ValidatorRefusal."""
    return store.insert_row("study_registrations", row, nonce=nonce)


def registration(store: ResultStore, study: str) -> Optional[dict]:
    return store.select_one("SELECT * FROM study_registrations WHERE study = ?", [study])


def study_names(store: ResultStore) -> list[str]:
    rows = store.select(
        "SELECT study FROM (SELECT study, min(id) AS first FROM study_registrations GROUP BY study) ORDER BY first")
    return [r["study"] for r in rows]


def study_rows(store: ResultStore, study: str) -> dict[str, list[dict]]:
    """Every results, quarantine and rejections row of ``study`` (by id), each with its run's row id order."""
    out: dict[str, list[dict]] = {}
    for table in ("results", "quarantine", "rejections"):
        out[table] = store.select(
            f"SELECT t.*, r.started_at AS run_started_at, r.exploratory AS run_exploratory FROM {table} AS t "
            "JOIN runs AS r ON r.run_id = t.run_id "
            "WHERE t.study = ? ORDER BY t.id", [study])
    return out


def record_verdict(store: ResultStore, row: dict[str, Any]) -> int:
    return store.insert_row("study_verdicts", row, nonce=None)


def verdicts(store: ResultStore, study: str) -> list[dict]:
    return store.select("SELECT * FROM study_verdicts WHERE study = ? ORDER BY id", [study])


def remeasured_rows(store: ResultStore, run_id: str) -> list[dict]:
    """Results rows of ``run_id`` that re-measure an earlier row, each joined with the row it re-measures
    (columns of the original prefixed ``orig_``)."""
    return store.select(
        "SELECT n.*, o.id AS orig_id, o.run_id AS orig_run_id, o.speedup AS orig_speedup, o.ci_low AS orig_ci_low, "
        "o.ci_high AS orig_ci_high, o.candidate_s AS orig_candidate_s, o.baseline_s AS orig_baseline_s, "
        "o.baseline AS orig_baseline, o.n_pairs AS orig_n_pairs FROM results AS n "
        "JOIN results AS o ON 'results:' || o.id = n.remeasure_of WHERE n.run_id = ? ORDER BY n.id", [run_id])


def last_iteration(store: ResultStore, study: str, arm: str, problem: str) -> int:
    """The highest iteration an arm recorded on a problem (results or refusals), 0 when none."""
    last = 0
    for table in ("results", "rejections"):
        r = store.select(f"SELECT max(iteration) AS last FROM {table} WHERE study = ? AND arm = ? AND problem = ?",
                         [study, arm, problem])
        last = max(last, r[0]["last"] or 0)
    return last


def study_results(store: ResultStore, study: str) -> list[dict]:
    """The accepted results of a study, oldest first."""
    return store.select("SELECT * FROM results WHERE study = ? ORDER BY id", [study])
