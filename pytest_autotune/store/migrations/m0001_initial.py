"""Migration 0001_initial (schema 1): every table, CHECK and trigger of the first schema, and the chain_state rows.

Frozen: this is what schema 1 was. Its column lists are its own (columns added later belong to their migration),
so that a new store and a store created at schema 1 and migrated since hold the same SQL.
"""

from __future__ import annotations

from typing import Any

from ..chain_rules import Named, chain_state_guard, chain_triggers, seed_chain_state
from ..rules import measurement_checks, measurement_triggers, run_rules
from ..sqlbuild import MAX_REAL, Column, check, create_table, hex64, json_is, timestamp, trigger

NAME = "0001_initial"

#: ``PRAGMA application_id`` of a pytest-autotune store ("PATS")
APPLICATION_ID = 0x50415453

_MEASUREMENT: list[Column] = [
    ("run_id", "TEXT", False), ("kind", "TEXT", False), ("nodeid", "TEXT", False), ("problem", "TEXT", False),
    ("problem_sha256", "TEXT", False), ("candidate", "TEXT", False), ("candidate_sha256", "TEXT", False),
    ("baseline", "TEXT", False), ("baseline_sha256", "TEXT", False), ("device", "TEXT", False),
    ("seeds", "TEXT", False), ("n_pairs", "INTEGER", False), ("candidate_s", "REAL", False),
    ("baseline_s", "REAL", False), ("speedup", "REAL", False), ("ci_low", "REAL", False), ("ci_high", "REAL", False),
    ("ci_target_met", "INTEGER", False), ("strawman_speedup", "REAL", False), ("correctness", "TEXT", False),
    ("probes", "TEXT", False), ("integrity", "TEXT", False), ("breaker", "TEXT", False),
    ("protocol_sha256", "TEXT", False), ("exploratory", "INTEGER", False), ("study", "TEXT", True),
    ("arm", "TEXT", True), ("iteration", "INTEGER", True), ("provenance", "TEXT", False),
]
_CHAIN: list[Column] = [("prev_hash", "TEXT", False), ("row_hash", "TEXT", False)]
_ROW_END: list[Column] = [("created_at", "TEXT", False), ("row_mac", "TEXT", False), *_CHAIN]

#: the columns of each table as this migration creates them
COLUMNS: dict[str, list[Column]] = {
    "protocols": [
        ("sha256", "TEXT", False), ("version", "TEXT", False), ("frozen", "INTEGER", False),
        ("n_seeds", "INTEGER", False), ("min_pairs", "INTEGER", False), ("max_speedup", "REAL", False),
        ("body", "TEXT", False), ("registered_at", "TEXT", False),
    ],
    "runs": [
        ("run_id", "TEXT", False), ("started_at", "TEXT", False), ("protocol_version", "TEXT", False),
        ("protocol_sha256", "TEXT", False), ("protocol_frozen", "INTEGER", False), ("exploratory", "INTEGER", False),
        ("git_sha", "TEXT", True), ("git_dirty", "INTEGER", True), ("harness_version", "TEXT", False),
        ("harness_sha256", "TEXT", False), ("host", "TEXT", False), ("device", "TEXT", False),
        ("device_fingerprint", "TEXT", False), ("python_version", "TEXT", False), ("torch_version", "TEXT", True),
        ("numpy_version", "TEXT", True), ("mlx_version", "TEXT", True), ("nonce_sha256", "TEXT", False),
        ("argv", "TEXT", False), ("provenance", "TEXT", False), ("finished_at", "TEXT", True),
        ("nonce", "TEXT", True), *_CHAIN,
    ],
    "results": [("id", "INTEGER", False), *_MEASUREMENT, *_ROW_END],
    "quarantine": [("id", "INTEGER", False), *_MEASUREMENT, ("reason", "TEXT", False), *_ROW_END],
    "rejections": [
        ("id", "INTEGER", False), ("run_id", "TEXT", False), ("nodeid", "TEXT", False), ("problem", "TEXT", False),
        ("candidate", "TEXT", False), ("device", "TEXT", False), ("gate", "TEXT", False), ("verdict", "TEXT", False),
        ("detail", "TEXT", False), ("created_at", "TEXT", False), *_CHAIN,
    ],
    "quarantine_releases": [
        ("id", "INTEGER", False), ("quarantine_id", "INTEGER", False), ("reason", "TEXT", False),
        ("released_by", "TEXT", False), ("released_at", "TEXT", False), *_CHAIN,
    ],
    "chain_state": [("tbl", "TEXT", False), ("head", "TEXT", False), ("count", "INTEGER", False)],
}

#: the chains this migration created (their chain_state rows and guard)
CHAINED_TABLES = ("runs", "results", "quarantine", "rejections", "quarantine_releases")

CHECK_EXPLANATIONS: dict[str, str] = {
    "digests": "every *_sha256 column must be 64 lowercase hex digits",
    "protocol_params": "protocol rows need a version, frozen 0/1, n_seeds >= 1, min_pairs >= 2, finite max_speedup > 1",
    "created_at": "timestamps must be ISO 8601 (YYYY-MM-DDTHH:MM:SS...)",
    "run_names": "run_id, started_at, protocol_version, harness_version, host and device must be non-empty",
    "flags": "boolean columns must be 0 or 1",
    "frozen_or_exploratory": "a run under an unfrozen protocol must be exploratory (--autotune-exploratory)",
    "run_json": "device_fingerprint and provenance must be JSON objects, argv a JSON array",
    "nonce_reveal": "finished_at and nonce are set together, the nonce as 64 hex digits",
    "kind": "kind must be 'kernel' or 'engine'",
    "names": "nodeid, problem, candidate, baseline and device must be non-empty",
    "times_positive": "candidate_s and baseline_s must be finite and > 0",
    "speedup_in_ci": "0 < ci_low <= speedup <= ci_high, all finite",
    "strawman_speedup": "strawman_speedup must be finite and > 0",
    "correctness_passed": "only measurements whose correctness gate passed are recorded (correctness = 'passed')",
    "probes_passed": "probes must be a JSON object with status 'passed' or 'disabled'",
    "integrity_passed": "only measurements whose integrity gate passed are recorded (integrity = 'passed')",
    "iteration": "iteration must be NULL or >= 0",
    "provenance_json": "provenance must be a JSON object",
    "row_mac": "row_mac must be 64 lowercase hex digits (HMAC-SHA256 with the run nonce)",
    "quarantine_reason": "a quarantined measurement needs a non-empty reason",
    "rejection_names": "run_id, nodeid and gate must be non-empty",
    "rejection_verdict": "verdict must be 'rejected', 'error' or 'quarantined'",
    "release_reason": "a release needs a written reason of at least 10 characters (a release is recorded, never silent)",
    "released_by": "released_by must name who released it",
}

#: this migration adds no rule to rows that existed before it
EPOCH_RULES: list[Named] = []


def _table(table: str, extra: list[str], *, primary_key: str | None = None) -> tuple[str, str]:
    return table, create_table(table, COLUMNS[table], extra, primary_key=primary_key)


def _tables() -> list[tuple[str, str]]:
    return [
        _table("protocols", [
            check("digests", hex64("sha256")),
            check("protocol_params", f"length(version) > 0 AND frozen IN (0, 1) AND n_seeds >= 1 AND min_pairs >= 2 "
                                     f"AND max_speedup > 1 AND max_speedup <= {MAX_REAL} AND length(body) > 0"),
            check("created_at", timestamp("registered_at")),
        ], primary_key="sha256"),
        _table("runs", [
            check("run_names", "length(run_id) > 0 AND length(started_at) > 0 AND length(protocol_version) > 0 "
                               "AND length(harness_version) > 0 AND length(host) > 0 AND length(device) > 0"),
            check("digests", f"{hex64('protocol_sha256')} AND {hex64('harness_sha256')} AND {hex64('nonce_sha256')}"),
            check("flags",
                  "protocol_frozen IN (0, 1) AND exploratory IN (0, 1) AND (git_dirty IS NULL OR git_dirty IN (0, 1))"),
            check("frozen_or_exploratory", "protocol_frozen = 1 OR exploratory = 1"),
            check("run_json", f"({json_is('device_fingerprint', 'object')}) AND ({json_is('argv', 'array')}) "
                              f"AND ({json_is('provenance', 'object')})"),
            check("nonce_reveal",
                  f"(finished_at IS NULL AND nonce IS NULL) OR (length(finished_at) > 0 AND {hex64('nonce')})"),
        ], primary_key="run_id"),
        _table("results", measurement_checks() + ["  CONSTRAINT one_result_per_item UNIQUE (run_id, nodeid)"]),
        _table("quarantine", measurement_checks() + [
            check("quarantine_reason", "length(trim(reason)) > 0"),
            "  CONSTRAINT one_quarantine_per_item UNIQUE (run_id, nodeid)",
        ]),
        _table("rejections", [
            check("rejection_names", "length(run_id) > 0 AND length(nodeid) > 0 AND length(gate) > 0"),
            check("rejection_verdict", "verdict IN ('rejected', 'error', 'quarantined')"),
            check("created_at", timestamp("created_at")),
        ]),
        _table("quarantine_releases", [
            check("release_reason", "length(trim(reason)) >= 10"),
            check("released_by", "length(trim(released_by)) > 0"),
            check("created_at", timestamp("released_at")),
        ]),
        _table("chain_state", [], primary_key="tbl"),
    ]


def _append_only(table: str, rule: str, message: str, events: tuple[str, ...]) -> list[Named]:
    out = []
    for event in events:
        name = f"{table}_append_only_{event.lower()}"
        out.append((name, trigger(name, f"BEFORE {event}", table, None, rule, message)))
    return out


def _triggers() -> list[Named]:
    out = _append_only("protocols", "protocols_append_only",
                       "protocols rows are never changed; a changed protocol is a new version with a new digest",
                       ("UPDATE", "DELETE"))
    frozen_cols = [c for c, _, _ in COLUMNS["runs"] if c not in ("finished_at", "nonce")]
    unchanged = " AND ".join(f"NEW.{c} IS OLD.{c}" for c in frozen_cols)
    out += [
        ("runs_protocol_registered", trigger(
            "runs_protocol_registered", "BEFORE INSERT", "runs",
            "NOT EXISTS (SELECT 1 FROM protocols WHERE sha256 = NEW.protocol_sha256 AND version = NEW.protocol_version)",
            "protocol_registered",
            "runs.protocol_sha256 and protocol_version must name a protocols row; register the protocol "
            "(ResultStore.register_protocol) before beginning the run")),
        ("runs_start_open", trigger(
            "runs_start_open", "BEFORE INSERT", "runs", "NEW.finished_at IS NOT NULL OR NEW.nonce IS NOT NULL",
            "run_starts_open",
            "a run is inserted unfinished (finished_at and nonce NULL); the nonce is revealed only at finish")),
        ("runs_finish_once", trigger(
            "runs_finish_once", "BEFORE UPDATE", "runs",
            "NOT coalesce(OLD.finished_at IS NULL AND OLD.nonce IS NULL AND NEW.finished_at IS NOT NULL "
            f"AND NEW.nonce IS NOT NULL AND {unchanged}, 0)",
            "runs_finish_once",
            "the only change allowed to a run is setting finished_at and nonce once, from NULL, at finish")),
    ]
    out += _append_only("runs", "runs_append_only", "runs rows are never deleted", ("DELETE",))
    out += chain_triggers("runs")
    out += measurement_triggers("results")
    out += measurement_triggers("quarantine")
    # quarantine rows need a reason: a CHECK
    out += run_rules("rejections") + chain_triggers("rejections")
    out += [
        ("quarantine_releases_target", trigger(
            "quarantine_releases_target", "BEFORE INSERT", "quarantine_releases",
            "NOT EXISTS (SELECT 1 FROM quarantine WHERE id = NEW.quarantine_id)", "release_target",
            "quarantine_id must name a quarantine row (see: autotune quarantine list)")),
        ("quarantine_releases_once", trigger(
            "quarantine_releases_once", "BEFORE INSERT", "quarantine_releases",
            "EXISTS (SELECT 1 FROM quarantine_releases WHERE quarantine_id = NEW.quarantine_id)", "release_once",
            "this quarantine row is already released; a release is recorded once")),
    ]
    return out + chain_triggers("quarantine_releases") + chain_state_guard(CHAINED_TABLES)


#: tables as this migration creates them (name, exact SQL)
TABLES: list[tuple[str, str]] = _tables()
#: triggers this migration creates
TRIGGERS: list[Named] = _triggers()


def apply(db: Any) -> None:
    for _, sql in TABLES:
        db.execute(sql)
    seed_chain_state(db, CHAINED_TABLES)
    # SQLite fires the BEFORE triggers of one event in reverse creation order (observed, not relied upon for
    # correctness): create them last-rule-first so that a raw insert is told about the most basic rule first
    for _, sql in reversed(TRIGGERS):
        db.execute(sql)
    db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
