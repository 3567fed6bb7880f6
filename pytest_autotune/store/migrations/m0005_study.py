"""Migration 0005_study (schema 5): studies (docs/guide/studies.md). ``rejections.study/arm/iteration/candidate_sha256``,
``results.remeasure_of`` (the row-by-row re-measure link), the tables ``study_registrations`` (what the
pre-registration check found at a study's first row: registered, uncommitted or unregistered; MACed with the
run's nonce like a measurement) and ``study_verdicts`` (every verdict a study report gave; one may read
non-exploratory only when it names a 'registered' registration of its study whose entry digest is the one it was
judged under), their rules, and the chain_state guard re-created to know the two new chains."""

from __future__ import annotations

from typing import Any

from ..chain_rules import Named, chain_state_guard, chain_triggers, record_epochs, seed_chain_state
from ..sqlbuild import (
    Column,
    check,
    column_check,
    create_table,
    hex64,
    json_is,
    run_exists,
    run_finished,
    timestamp,
    trigger,
)
from . import m0001_initial

NAME = "0005_study"

_STUDY_NAME_CHARS = "'*[^A-Za-z0-9._:+-]*'"


def _study_name(col: str) -> str:
    return f"(length({col}) BETWEEN 1 AND 200 AND {col} NOT GLOB {_STUDY_NAME_CHARS})"


#: (column, definition for ``ALTER TABLE rejections ADD COLUMN``), in order
REJECTIONS_COLUMN_DEFS: list[tuple[str, str]] = [
    ("study", "study TEXT"),
    ("arm", "arm TEXT"),
    ("iteration", "iteration INTEGER " + column_check("iteration", "iteration IS NULL OR iteration >= 0")),
    ("candidate_sha256", "candidate_sha256 TEXT "
     + column_check("rejection_digest", f"candidate_sha256 IS NULL OR {hex64('candidate_sha256')}")),
]
#: ``results.remeasure_of``: "results:<id>", the row this one re-measures (``autotune remeasure``)
RESULTS_COLUMN_DEFS: list[tuple[str, str]] = [
    ("remeasure_of", "remeasure_of TEXT " + column_check(
        "remeasure_ref",
        "remeasure_of IS NULL OR (remeasure_of GLOB 'results:[1-9]*' AND substr(remeasure_of, 9) NOT GLOB "
        "'*[^0-9]*' AND length(remeasure_of) <= 26)")),
]

_CHAIN: list[Column] = [("prev_hash", "TEXT", False), ("row_hash", "TEXT", False)]
#: the columns of the two tables this migration creates
COLUMNS: dict[str, list[Column]] = {
    "study_registrations": [
        ("id", "INTEGER", False), ("run_id", "TEXT", False), ("study", "TEXT", False), ("status", "TEXT", False),
        ("registry", "TEXT", False), ("entry", "TEXT", True), ("entry_sha256", "TEXT", True),
        ("git_commit", "TEXT", True), ("detail", "TEXT", False), ("created_at", "TEXT", False),
        ("row_mac", "TEXT", False), *_CHAIN,
    ],
    "study_verdicts": [
        ("id", "INTEGER", False), ("study", "TEXT", False), ("verdict", "TEXT", False), ("label", "TEXT", False),
        ("exploratory", "INTEGER", False), ("plumbing_suspect", "INTEGER", False),
        ("registration_id", "INTEGER", True), ("entry_sha256", "TEXT", True), ("report", "TEXT", False),
        ("created_at", "TEXT", False), *_CHAIN,
    ],
}
#: every chain after this migration (the guard's CASE names each)
CHAINED_TABLES = m0001_initial.CHAINED_TABLES + ("study_registrations", "study_verdicts")

#: registration statuses: the entry was committed (HEAD) and unchanged in the working tree at the study's first
#: row / present but not committed (or differing from HEAD) / absent
REGISTRATION_STATUSES = ("registered", "uncommitted", "unregistered")

CHECK_EXPLANATIONS = {
    "rejection_digest": "rejections.candidate_sha256 must be NULL or 64 lowercase hex digits",
    "remeasure_ref": "remeasure_of must be NULL or results:<id> (a results row id)",
    "registration_names": "a registration names its run, the study (1-200 characters from A-Z a-z 0-9 . _ : + -), "
                          "the registry file and a non-empty detail",
    "registration_status": "status must be 'registered', 'uncommitted' or 'unregistered'",
    "registration_entry": "an unregistered study has no entry, digest or commit; otherwise entry is a JSON object "
                          "with a 64-hex entry_sha256, and a registered one names the git commit (40 or 64 hex)",
    "verdict_flags": "exploratory and plumbing_suspect must be 0 or 1",
    "verdict_kind": "the study name is valid and verdict is supported, not supported, saturated at <wall>, void: "
                    "treatment not delivered..., below usability bar... or incomplete...",
    "verdict_label": "label must be the verdict, prefixed 'exploratory: ' when exploratory and followed by "
                     "' [plumbing suspect]' when plumbing_suspect",
    "verdict_digest": "entry_sha256 must be NULL or 64 lowercase hex digits",
    "verdict_report": "report must be a JSON object",
}


def _tables() -> list[tuple[str, str]]:
    registrations = create_table("study_registrations", COLUMNS["study_registrations"], [
        check("registration_names", f"length(run_id) > 0 AND {_study_name('study')} AND length(registry) > 0 "
                                    "AND length(trim(detail)) > 0"),
        check("registration_status", "status IN ('registered', 'uncommitted', 'unregistered')"),
        check(
            "registration_entry",
            "CASE WHEN status = 'unregistered' THEN entry IS NULL AND entry_sha256 IS NULL AND git_commit IS NULL "
            f"ELSE ({json_is('entry', 'object')}) AND {hex64('entry_sha256')} "
            "AND (status <> 'registered' OR (length(git_commit) IN (40, 64) "
            "AND git_commit NOT GLOB '*[^0-9a-f]*')) END",
        ),
        check("created_at", timestamp("created_at")),
        check("row_mac", hex64("row_mac")),
        "  CONSTRAINT one_registration_per_study UNIQUE (study)",
    ])
    verdicts = create_table("study_verdicts", COLUMNS["study_verdicts"], [
        check("verdict_flags", "exploratory IN (0, 1) AND plumbing_suspect IN (0, 1)"),
        check(
            "verdict_kind",
            f"{_study_name('study')} AND (verdict IN ('supported', 'not supported') "
            "OR verdict GLOB 'saturated at ?*' OR verdict GLOB 'void: treatment not delivered*' "
            "OR verdict GLOB 'below usability bar*' OR verdict GLOB 'incomplete*')",
        ),
        check(
            "verdict_label",
            "label = (CASE WHEN exploratory = 1 THEN 'exploratory: ' ELSE '' END) || verdict "
            "|| (CASE WHEN plumbing_suspect = 1 THEN ' [plumbing suspect]' ELSE '' END)",
        ),
        check("verdict_digest", f"entry_sha256 IS NULL OR {hex64('entry_sha256')}"),
        check("verdict_report", json_is("report", "object")),
        check("created_at", timestamp("created_at")),
    ])
    return [("study_registrations", registrations), ("study_verdicts", verdicts)]


def _study_row_triggers() -> list[Named]:
    """Rules on results, quarantine and rejections rows that carry a study (the columns existed on results and
    quarantine since 0001; rejections got them here)."""
    out = []
    for table in ("results", "quarantine", "rejections"):
        fields = (
            "(NEW.study IS NULL AND NEW.arm IS NULL AND NEW.iteration IS NULL) "
            f"OR ({_study_name('NEW.study')} AND {_study_name('NEW.arm')} "
            "AND (NEW.iteration IS NULL OR NEW.iteration >= 0))"
        )
        name = f"{table}_study_fields"
        out.append((name, trigger(
            name, "BEFORE INSERT", table, f"NOT coalesce({fields}, 0)", "study_fields",
            "study and arm are both NULL (with iteration NULL) or both names of 1 to 200 characters from "
            "A-Z a-z 0-9 . _ : + - (iteration NULL or >= 0)")))
        name = f"{table}_study_registered_first"
        out.append((name, trigger(
            name, "BEFORE INSERT", table,
            "NEW.study IS NOT NULL AND NOT EXISTS (SELECT 1 FROM study_registrations WHERE study = NEW.study)",
            "study_registered_first",
            "a row of a study needs the study registration (what the pre-registration check found) recorded "
            "before it: insert the study_registrations row first (pytest-autotune does, at the study first row)")))
    return out


def _remeasure_link_triggers() -> list[Named]:
    valid = (
        "(SELECT o.kind = NEW.kind AND o.problem = NEW.problem AND o.problem_sha256 = NEW.problem_sha256 "
        "AND o.candidate = NEW.candidate AND o.candidate_sha256 = NEW.candidate_sha256 AND o.device = NEW.device "
        "AND o.run_id <> NEW.run_id "
        "FROM results AS o WHERE o.id = CAST(substr(NEW.remeasure_of, 9) AS INTEGER) "
        "AND 'results:' || o.id = NEW.remeasure_of)"
    )
    return [
        ("results_remeasure_link", trigger(
            "results_remeasure_link", "BEFORE INSERT", "results",
            # a malformed reference is left to the CHECK remeasure_ref to name
            "NEW.remeasure_of GLOB 'results:[1-9]*' AND substr(NEW.remeasure_of, 9) NOT GLOB '*[^0-9]*' "
            f"AND NOT coalesce({valid}, 0)", "remeasure_link",
            "remeasure_of = results:ID must name an existing results row of another run with the same kind, "
            "problem, problem_sha256, candidate, candidate_sha256 and device (a re-measurement re-times the same "
            "bytes on the same device)")),
        ("results_remeasure_once", trigger(
            "results_remeasure_once", "BEFORE INSERT", "results",
            "NEW.remeasure_of IS NOT NULL AND EXISTS (SELECT 1 FROM results WHERE run_id = NEW.run_id "
            "AND remeasure_of = NEW.remeasure_of)", "remeasure_once",
            "this run already re-measured that results row; a row is re-measured once per run")),
    ]


def _study_table_triggers() -> list[Named]:
    out = [
        ("study_registrations_run_exists", trigger(
            "study_registrations_run_exists", "BEFORE INSERT", "study_registrations", f"NOT {run_exists()}",
            "run_exists", "study_registrations.run_id must name a row of runs; begin the run first")),
        ("study_registrations_run_open", trigger(
            "study_registrations_run_open", "BEFORE INSERT", "study_registrations", run_finished(), "run_open",
            "the run is finished (its nonce is revealed); rows can only be recorded while their run is open")),
    ]
    out += chain_triggers("study_registrations")
    out += [
        ("study_verdicts_registration", trigger(
            "study_verdicts_registration", "BEFORE INSERT", "study_verdicts",
            "NEW.registration_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM study_registrations "
            "WHERE id = NEW.registration_id AND study = NEW.study)", "verdict_registration",
            "registration_id must be NULL or name the study_registrations row of the same study")),
        ("study_verdicts_exploratory", trigger(
            "study_verdicts_exploratory", "BEFORE INSERT", "study_verdicts",
            "NEW.exploratory = 0 AND NOT EXISTS (SELECT 1 FROM study_registrations WHERE id = NEW.registration_id "
            "AND study = NEW.study AND status = 'registered' AND entry_sha256 = NEW.entry_sha256)",
            "verdict_exploratory",
            "a verdict reads exploratory unless its study was registered (committed) before its first row and "
            "judged under that same entry (registration_id and entry_sha256 naming a registered registration)")),
    ]
    return out + chain_triggers("study_verdicts")


TABLES: list[tuple[str, str]] = _tables()
#: the study rules on existing tables: rows below this migration's rule_epochs.first_id are replayed without them
EPOCH_RULES: list[Named] = _study_row_triggers()
#: the chain_state guard after this migration: it knows every chain
CHAIN_STATE_GUARD: list[Named] = chain_state_guard(CHAINED_TABLES)
TRIGGERS: list[Named] = EPOCH_RULES + _remeasure_link_triggers() + _study_table_triggers()


def apply(db: Any) -> None:
    for _, definition in REJECTIONS_COLUMN_DEFS:
        db.execute(f"ALTER TABLE rejections ADD COLUMN {definition}")
    for _, definition in RESULTS_COLUMN_DEFS:
        db.execute(f"ALTER TABLE results ADD COLUMN {definition}")
    for _, sql in TABLES:
        db.execute(sql)
    record_epochs(db, NAME, ("results", "quarantine", "rejections"))
    # the guard refuses new chain_state rows and knows only the chains of its time: re-create it
    for name, _ in CHAIN_STATE_GUARD:
        db.execute(f"DROP TRIGGER {name}")
    seed_chain_state(db, tuple(t for t in CHAINED_TABLES if t not in m0001_initial.CHAINED_TABLES))
    for _, sql in reversed(TRIGGERS + CHAIN_STATE_GUARD):
        db.execute(sql)
