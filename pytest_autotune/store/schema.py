"""The results database's schema: tables, named CHECK constraints and validator triggers, as migrations.

The validator lives in the database itself, so that a raw ``sqlite3 results.db "insert into results ..."`` from
the sqlite3 shell meets exactly the same rules as the plugin. Every rule is either a named CHECK constraint
(SQLite reports ``CHECK constraint failed: <name>``) or a trigger that ``RAISE(ABORT, '<rule>: <explanation>')``.
Triggers use SQLite built-ins only (json1 included): nothing registered from Python.

Migrations are applied with :class:`sqlite_utils.migrations.Migrations`; each migration executes raw SQL and
sets ``PRAGMA user_version``. :data:`EXPECTED_SCHEMA` is the exact SQL of every object after all migrations,
which ``verify`` compares against ``sqlite_master`` (a dropped or edited trigger is a problem).

Migrations (a new database runs them all, in order; an older one the ones it lacks, in place):

* ``0001_initial`` (user_version 1): every table, CHECK and trigger of the first schema.
* ``0002_retest`` (user_version 2): ``results.retest_of`` and ``results.transfer_ratio`` (the held-out retest
  link, docs/heldout.md) with their CHECKs, added by ``ALTER TABLE ... ADD COLUMN`` (existing rows read NULL
  there, so they keep their hashes: :data:`HASH_OMIT_NULL`), and the trigger ``results_retest_link``.
* ``0003_provenance`` (user_version 3): the ``provenance_complete`` rule and ``rule_epochs``.
* ``0004_engine`` (user_version 4): an engine row (``kind = 'engine'``) must name one engine for both arms and
  carry the paired seeds of both arms (``engine_arms``, ``engine_paired_seeds``; docs/engines.md).
* ``0005_study`` (user_version 5): studies (docs/studies.md): ``rejections.study/arm/iteration/candidate_sha256``,
  ``results.remeasure_of`` (the row-by-row re-measure link), the tables ``study_registrations`` (what the
  pre-registration check found at a study's first row) and ``study_verdicts`` (every verdict a study report
  gave), and their rules.

docs/schema.md documents every table, column, constraint and trigger defined here.
"""

from __future__ import annotations

from sqlite_utils.migrations import Migrations

#: ``PRAGMA user_version`` once every migration below has been applied.
SCHEMA_VERSION = 5

#: ``PRAGMA application_id`` of a pytest-autotune store ("PATS").
APPLICATION_ID = 0x50415453

#: prev_hash of the first row of every chain.
ZERO_HASH = "0" * 64

MAX_REAL = "1.7976931348623157e308"

migrations = Migrations("pytest_autotune.store")

# ----------------------------------------------------------------------------------------------- columns
# (name, declared type, nullable). Types are STRICT-table types: values are stored as exactly this type or refused,
# so what ``verify`` reads back hashes the same as what the writer hashed.

_MEASUREMENT: list[tuple[str, str, bool]] = [
    ("run_id", "TEXT", False),
    ("kind", "TEXT", False),
    ("nodeid", "TEXT", False),
    ("problem", "TEXT", False),
    ("problem_sha256", "TEXT", False),
    ("candidate", "TEXT", False),
    ("candidate_sha256", "TEXT", False),
    ("baseline", "TEXT", False),
    ("baseline_sha256", "TEXT", False),
    ("device", "TEXT", False),
    ("seeds", "TEXT", False),
    ("n_pairs", "INTEGER", False),
    ("candidate_s", "REAL", False),
    ("baseline_s", "REAL", False),
    ("speedup", "REAL", False),
    ("ci_low", "REAL", False),
    ("ci_high", "REAL", False),
    ("ci_target_met", "INTEGER", False),
    ("strawman_speedup", "REAL", False),
    ("correctness", "TEXT", False),
    ("probes", "TEXT", False),
    ("integrity", "TEXT", False),
    ("breaker", "TEXT", False),
    ("protocol_sha256", "TEXT", False),
    ("exploratory", "INTEGER", False),
    ("study", "TEXT", True),
    ("arm", "TEXT", True),
    ("iteration", "INTEGER", True),
    ("provenance", "TEXT", False),
]

_CHAIN = [("prev_hash", "TEXT", False), ("row_hash", "TEXT", False)]

COLUMNS: dict[str, list[tuple[str, str, bool]]] = {
    "protocols": [
        ("sha256", "TEXT", False),
        ("version", "TEXT", False),
        ("frozen", "INTEGER", False),
        ("n_seeds", "INTEGER", False),
        ("min_pairs", "INTEGER", False),
        ("max_speedup", "REAL", False),
        ("body", "TEXT", False),
        ("registered_at", "TEXT", False),
    ],
    "runs": [
        ("run_id", "TEXT", False),
        ("started_at", "TEXT", False),
        ("protocol_version", "TEXT", False),
        ("protocol_sha256", "TEXT", False),
        ("protocol_frozen", "INTEGER", False),
        ("exploratory", "INTEGER", False),
        ("git_sha", "TEXT", True),
        ("git_dirty", "INTEGER", True),
        ("harness_version", "TEXT", False),
        ("harness_sha256", "TEXT", False),
        ("host", "TEXT", False),
        ("device", "TEXT", False),
        ("device_fingerprint", "TEXT", False),
        ("python_version", "TEXT", False),
        ("torch_version", "TEXT", True),
        ("numpy_version", "TEXT", True),
        ("mlx_version", "TEXT", True),
        ("nonce_sha256", "TEXT", False),
        ("argv", "TEXT", False),
        ("provenance", "TEXT", False),
        ("finished_at", "TEXT", True),
        ("nonce", "TEXT", True),
        *_CHAIN,
    ],
    "results": [
        ("id", "INTEGER", False),
        *_MEASUREMENT,
        ("created_at", "TEXT", False),
        ("row_mac", "TEXT", False),
        *_CHAIN,
        # migration 0002_retest (ADD COLUMN appends them after the last column)
        ("retest_of", "TEXT", True),
        ("transfer_ratio", "REAL", True),
        # migration 0005_study
        ("remeasure_of", "TEXT", True),
    ],
    "quarantine": [
        ("id", "INTEGER", False),
        *_MEASUREMENT,
        ("reason", "TEXT", False),
        ("created_at", "TEXT", False),
        ("row_mac", "TEXT", False),
        *_CHAIN,
    ],
    "rejections": [
        ("id", "INTEGER", False),
        ("run_id", "TEXT", False),
        ("nodeid", "TEXT", False),
        ("problem", "TEXT", False),
        ("candidate", "TEXT", False),
        ("device", "TEXT", False),
        ("gate", "TEXT", False),
        ("verdict", "TEXT", False),
        ("detail", "TEXT", False),
        ("created_at", "TEXT", False),
        *_CHAIN,
        # migration 0005_study (ADD COLUMN)
        ("study", "TEXT", True),
        ("arm", "TEXT", True),
        ("iteration", "INTEGER", True),
        ("candidate_sha256", "TEXT", True),
    ],
    "quarantine_releases": [
        ("id", "INTEGER", False),
        ("quarantine_id", "INTEGER", False),
        ("reason", "TEXT", False),
        ("released_by", "TEXT", False),
        ("released_at", "TEXT", False),
        *_CHAIN,
    ],
    "chain_state": [
        ("tbl", "TEXT", False),
        ("head", "TEXT", False),
        ("count", "INTEGER", False),
    ],
    # migration 0005_study (docs/studies.md)
    "study_registrations": [
        ("id", "INTEGER", False),
        ("run_id", "TEXT", False),
        ("study", "TEXT", False),
        ("status", "TEXT", False),
        ("registry", "TEXT", False),
        ("entry", "TEXT", True),
        ("entry_sha256", "TEXT", True),
        ("git_commit", "TEXT", True),
        ("detail", "TEXT", False),
        ("created_at", "TEXT", False),
        ("row_mac", "TEXT", False),
        *_CHAIN,
    ],
    "study_verdicts": [
        ("id", "INTEGER", False),
        ("study", "TEXT", False),
        ("verdict", "TEXT", False),
        ("label", "TEXT", False),
        ("exploratory", "INTEGER", False),
        ("plumbing_suspect", "INTEGER", False),
        ("registration_id", "INTEGER", True),
        ("entry_sha256", "TEXT", True),
        ("report", "TEXT", False),
        ("created_at", "TEXT", False),
        *_CHAIN,
    ],
}

#: column name -> declared type, per table (used to normalise values before hashing)
COLUMN_TYPES: dict[str, dict[str, str]] = {t: {c: ty for c, ty, _ in cols} for t, cols in COLUMNS.items()}

#: the chains migration 0001 created (its chain_state rows and guard)
CHAINED_TABLES_0001 = ("runs", "results", "quarantine", "rejections", "quarantine_releases")
#: tables whose rows form a hash chain (prev_hash/row_hash), in the order verify reports them
CHAINED_TABLES = CHAINED_TABLES_0001 + ("study_registrations", "study_verdicts")

#: tables whose rows carry row_mac = HMAC(run nonce, canonical row)
MAC_TABLES = ("results", "quarantine", "study_registrations")

#: columns added by a later migration (``ALTER TABLE ... ADD COLUMN``), per table, in the order they were added
ADDED_COLUMNS: dict[str, tuple[str, ...]] = {
    "results": ("retest_of", "transfer_ratio", "remeasure_of"),
    "rejections": ("study", "arm", "iteration", "candidate_sha256"),
}

#: columns left out of the canonical row when NULL: the columns added by later migrations, so that a row written
#: before the migration (NULL there) hashes, and MACs, exactly as it did when it was written; a set value is
#: always part of the canonical row
HASH_OMIT_NULL: dict[str, frozenset[str]] = {t: frozenset(ADDED_COLUMNS.get(t, ())) for t in COLUMNS}

#: columns never part of the canonical row: identity and the chain/MAC columns themselves; for runs also the two
#: columns written at finish (the nonce is checked through its commitment instead)
HASH_EXCLUDED: dict[str, frozenset[str]] = {
    t: frozenset({"id", "prev_hash", "row_hash", "row_mac"} | ({"finished_at", "nonce"} if t == "runs" else set()))
    for t in COLUMNS
}


# ----------------------------------------------------------------------------------------------- SQL helpers


def _hex64(col: str) -> str:
    return f"(length({col}) = 64 AND {col} NOT GLOB '*[^0-9a-f]*')"


def _finite_positive(col: str) -> str:
    return f"({col} > 0 AND {col} <= {MAX_REAL})"


def _timestamp(col: str) -> str:
    return f"({col} GLOB '[0-9][0-9][0-9][0-9]-[0-1][0-9]-[0-3][0-9]T[0-2][0-9]:[0-5][0-9]:[0-6][0-9]*')"


def _json_is(col: str, json_type: str) -> str:
    # json_type() raises on malformed JSON, so it only runs once json_valid() said yes (CASE is lazy)
    return f"CASE WHEN json_valid({col}) THEN json_type({col}) = '{json_type}' ELSE 0 END"


def _check(name: str, expr: str) -> str:
    # coalesce(..., 0): a CHECK whose expression is NULL passes in SQLite; ours must not
    return f"  CONSTRAINT {name} CHECK (coalesce({expr}, 0))"


def _column_defs(table: str) -> list[str]:
    """Column definitions of the table as migration 0001 creates it (columns added later are not there)."""
    out = []
    for name, ty, nullable in COLUMNS[table]:
        if name in ADDED_COLUMNS.get(table, ()):
            continue
        if name == "id":
            out.append("  id INTEGER PRIMARY KEY AUTOINCREMENT")
        else:
            out.append(f"  {name} {ty}{'' if nullable else ' NOT NULL'}")
    return out


def _create_table(table: str, extra: list[str], *, primary_key: str | None = None) -> str:
    lines = _column_defs(table)
    if primary_key:
        lines.append(f"  PRIMARY KEY ({primary_key})")
    lines.extend(extra)
    return f"CREATE TABLE {table} (\n" + ",\n".join(lines) + "\n) STRICT"


def _trigger(name: str, timing: str, table: str, when: str | None, rule: str, message: str) -> str:
    assert "'" not in message, message
    when_sql = f"\nWHEN {when}" if when else ""
    return (
        f"CREATE TRIGGER {name} {timing} ON {table}{when_sql}\n"
        f"BEGIN\n  SELECT RAISE(ABORT, '{rule}: {message}');\nEND"
    )


def _run_exists() -> str:
    return "EXISTS (SELECT 1 FROM runs WHERE run_id = NEW.run_id)"


def _protocol_param(param: str) -> str:
    return (
        f"(SELECT p.{param} FROM runs AS r JOIN protocols AS p ON p.sha256 = r.protocol_sha256 "
        f"WHERE r.run_id = NEW.run_id)"
    )


def _run_field(field: str) -> str:
    return f"(SELECT {field} FROM runs WHERE run_id = NEW.run_id)"


def _chain_triggers(table: str) -> list[tuple[str, str]]:
    return [
        (
            f"{table}_hash_chain",
            _trigger(
                f"{table}_hash_chain",
                "BEFORE INSERT",
                table,
                f"NOT coalesce(NEW.prev_hash = (SELECT head FROM chain_state WHERE tbl = '{table}') "
                f"AND {_hex64('NEW.row_hash')} AND NEW.row_hash <> NEW.prev_hash, 0)",
                "hash_chain",
                f"prev_hash must be the row_hash of the last {table} row (chain_state.head, 64 zeros for the first "
                "row) and row_hash 64 lowercase hex digits different from prev_hash; insert through "
                "pytest-autotune, which computes both",
            ),
        ),
        (
            f"{table}_chain_advance",
            (
                f"CREATE TRIGGER {table}_chain_advance AFTER INSERT ON {table}\n"
                f"BEGIN\n  UPDATE chain_state SET head = NEW.row_hash, count = count + 1 WHERE tbl = '{table}';\nEND"
            ),
        ),
    ] + (
        []
        if table == "runs"
        else [
            (
                f"{table}_append_only_update",
                _trigger(
                    f"{table}_append_only_update",
                    "BEFORE UPDATE",
                    table,
                    None,
                    f"{table}_append_only",
                    f"{table} rows are never updated; record a new row instead",
                ),
            ),
            (
                f"{table}_append_only_delete",
                _trigger(
                    f"{table}_append_only_delete",
                    "BEFORE DELETE",
                    table,
                    None,
                    f"{table}_append_only",
                    f"{table} rows are never deleted; the history is append-only",
                ),
            ),
        ]
    )


# ----------------------------------------------------------------------------------------------- tables


def _measurement_checks() -> list[str]:
    digests = " AND ".join(
        _hex64(c) for c in ("problem_sha256", "candidate_sha256", "baseline_sha256", "protocol_sha256")
    )
    return [
        _check("kind", "kind IN ('kernel', 'engine')"),
        _check(
            "names",
            "length(nodeid) > 0 AND length(problem) > 0 AND length(candidate) > 0 "
            "AND length(baseline) > 0 AND length(device) > 0",
        ),
        _check("digests", digests),
        _check("times_positive", f"{_finite_positive('candidate_s')} AND {_finite_positive('baseline_s')}"),
        _check("speedup_in_ci", f"0 < ci_low AND ci_low <= speedup AND speedup <= ci_high AND ci_high <= {MAX_REAL}"),
        _check("strawman_speedup", _finite_positive("strawman_speedup")),
        _check("correctness_passed", "correctness = 'passed'"),
        _check(
            "probes_passed",
            "CASE WHEN json_valid(probes) THEN (CASE WHEN json_type(probes) = 'object' "
            "THEN json_extract(probes, '$.status') IN ('passed', 'disabled') ELSE 0 END) ELSE 0 END",
        ),
        _check("integrity_passed", "integrity = 'passed'"),
        _check("flags", "ci_target_met IN (0, 1) AND exploratory IN (0, 1)"),
        _check("iteration", "iteration IS NULL OR iteration >= 0"),
        _check("provenance_json", _json_is("provenance", "object")),
        _check("created_at", _timestamp("created_at")),
        _check("row_mac", _hex64("row_mac")),
    ]


# the held-out retest link (migration 0002_retest): "results:<id>" (a results row of this database) or
# "report:<file>#<run_id>/<nodeid>" (an item of a committed JSON report); the ratio = held-out / origin speedup
RETEST_RESULTS_PREFIX = "results:"
RETEST_REPORT_PREFIX = "report:"
#: relative tolerance of ``transfer_ratio = speedup / origin speedup`` (rule retest_link)
TRANSFER_RATIO_RTOL = 1e-9


def _column_check(name: str, expr: str) -> str:
    return f"CONSTRAINT {name} CHECK (coalesce({expr}, 0))"


#: (column, column definition as ``ALTER TABLE results ADD COLUMN`` receives it), in migration order
RETEST_COLUMN_DEFS: list[tuple[str, str]] = [
    (
        "retest_of",
        "retest_of TEXT "
        + _column_check(
            "retest_ref",
            "retest_of IS NULL "
            "OR (retest_of GLOB 'results:[1-9]*' AND substr(retest_of, 9) NOT GLOB '*[^0-9]*' "
            "AND length(retest_of) <= 26) "
            "OR (retest_of GLOB 'report:*' AND length(trim(substr(retest_of, 8))) > 0)",
        ),
    ),
    (
        "transfer_ratio",
        "transfer_ratio REAL "
        + _column_check("retest_pair", "(retest_of IS NULL) = (transfer_ratio IS NULL)")
        + " "
        + _column_check("transfer_ratio_positive", f"transfer_ratio IS NULL OR {_finite_positive('transfer_ratio')}"),
    ),
]


def _with_added_columns(table_sql: str, table: str, defs: list[str]) -> str:
    """``table_sql`` as SQLite stores it after ``ALTER TABLE table ADD COLUMN <def>`` for each of ``defs``:
    SQLite inserts ``, <def>`` right after the text of the last column definition (before the table
    constraints). Computed here so that ``verify`` can compare the stored SQL exactly; a test checks that a new
    database and a migrated one store exactly this."""
    last = _column_defs(table)[-1]
    anchor = last + ",\n"
    assert table_sql.count(anchor) == 1, (table, anchor)
    return table_sql.replace(anchor, last + "".join(f", {d}" for d in defs) + ",\n")


def _tables() -> list[tuple[str, str]]:
    """Every table as migration 0001 creates it."""
    protocols = _create_table(
        "protocols",
        [
            _check("digests", _hex64("sha256")),
            _check(
                "protocol_params",
                f"length(version) > 0 AND frozen IN (0, 1) AND n_seeds >= 1 AND min_pairs >= 2 "
                f"AND max_speedup > 1 AND max_speedup <= {MAX_REAL} AND length(body) > 0",
            ),
            _check("created_at", _timestamp("registered_at")),
        ],
        primary_key="sha256",
    )
    runs = _create_table(
        "runs",
        [
            _check(
                "run_names",
                "length(run_id) > 0 AND length(started_at) > 0 AND length(protocol_version) > 0 "
                "AND length(harness_version) > 0 AND length(host) > 0 AND length(device) > 0",
            ),
            _check(
                "digests",
                f"{_hex64('protocol_sha256')} AND {_hex64('harness_sha256')} AND {_hex64('nonce_sha256')}",
            ),
            _check(
                "flags",
                "protocol_frozen IN (0, 1) AND exploratory IN (0, 1) AND (git_dirty IS NULL OR git_dirty IN (0, 1))",
            ),
            _check("frozen_or_exploratory", "protocol_frozen = 1 OR exploratory = 1"),
            _check(
                "run_json",
                f"({_json_is('device_fingerprint', 'object')}) AND ({_json_is('argv', 'array')}) "
                f"AND ({_json_is('provenance', 'object')})",
            ),
            _check(
                "nonce_reveal",
                f"(finished_at IS NULL AND nonce IS NULL) OR (length(finished_at) > 0 AND {_hex64('nonce')})",
            ),
        ],
        primary_key="run_id",
    )
    results = _create_table(
        "results",
        _measurement_checks() + ["  CONSTRAINT one_result_per_item UNIQUE (run_id, nodeid)"],
    )
    quarantine = _create_table(
        "quarantine",
        _measurement_checks()
        + [
            _check("quarantine_reason", "length(trim(reason)) > 0"),
            "  CONSTRAINT one_quarantine_per_item UNIQUE (run_id, nodeid)",
        ],
    )
    rejections = _create_table(
        "rejections",
        [
            _check("rejection_names", "length(run_id) > 0 AND length(nodeid) > 0 AND length(gate) > 0"),
            _check("rejection_verdict", "verdict IN ('rejected', 'error', 'quarantined')"),
            _check("created_at", _timestamp("created_at")),
        ],
    )
    releases = _create_table(
        "quarantine_releases",
        [
            _check("release_reason", "length(trim(reason)) >= 10"),
            _check("released_by", "length(trim(released_by)) > 0"),
            _check("created_at", _timestamp("released_at")),
        ],
    )
    chain_state = _create_table("chain_state", [], primary_key="tbl")
    return [
        ("protocols", protocols),
        ("runs", runs),
        ("results", results),
        ("quarantine", quarantine),
        ("rejections", rejections),
        ("quarantine_releases", releases),
        ("chain_state", chain_state),
    ]


#: migration 0003: from which row id on a table is judged by the rules a later migration added (rows before it
#: got in under the rules of their time; verify's replay judges them so). An id, not a timestamp: a forger can
#: backdate created_at, not the id of a row appended after the migration.
RULE_EPOCHS_SQL = (
    "CREATE TABLE rule_epochs (\n"
    "  migration TEXT NOT NULL,\n"
    "  tbl TEXT NOT NULL,\n"
    "  first_id INTEGER NOT NULL,\n"
    "  PRIMARY KEY (migration, tbl)\n"
    ") STRICT"
)


def _final_tables() -> list[tuple[str, str]]:
    """Every table after the last migration."""
    out = []
    for name, sql in TABLES_0001:
        if name == "results":
            sql = _with_added_columns(sql, "results", [d for _, d in RETEST_COLUMN_DEFS + REMEASURE_COLUMN_DEFS])
        elif name == "rejections":
            sql = _with_added_columns(sql, "rejections", [d for _, d in REJECTION_STUDY_COLUMN_DEFS])
        out.append((name, sql))
    out.append(("rule_epochs", RULE_EPOCHS_SQL))
    out += TABLES_0005
    return out


# ----------------------------------------------------------------------------------------------- triggers


def _measurement_triggers(table: str) -> list[tuple[str, str]]:
    run_exists = _run_exists()
    out = [
        (
            f"{table}_run_exists",
            _trigger(
                f"{table}_run_exists",
                "BEFORE INSERT",
                table,
                f"NOT {run_exists}",
                "run_exists",
                f"{table}.run_id must name a row of runs; begin the run (ResultStore.begin_run) first",
            ),
        ),
        (
            f"{table}_run_open",
            _trigger(
                f"{table}_run_open",
                "BEFORE INSERT",
                table,
                "EXISTS (SELECT 1 FROM runs WHERE run_id = NEW.run_id AND finished_at IS NOT NULL)",
                "run_open",
                "the run is finished (its nonce is revealed); rows can only be recorded while their run is open",
            ),
        ),
        (
            f"{table}_paired_seeds",
            _trigger(
                f"{table}_paired_seeds",
                "BEFORE INSERT",
                table,
                f"{run_exists} AND NOT coalesce(CASE WHEN json_valid(NEW.seeds) THEN ("
                "CASE WHEN json_type(NEW.seeds) = 'array' THEN ("
                f"json_array_length(NEW.seeds) >= {_protocol_param('n_seeds')} "
                "AND NOT EXISTS (SELECT 1 FROM json_each(NEW.seeds) "
                "WHERE type <> 'integer' OR typeof(value) <> 'integer' OR value < 0) "
                "AND (SELECT count(DISTINCT value) FROM json_each(NEW.seeds)) = json_array_length(NEW.seeds)"
                ") ELSE 0 END) ELSE 0 END, 0)",
                "paired_seeds",
                "seeds must be a JSON array of at least the protocol seed count (protocols.n_seeds of the run) "
                "distinct non-negative integers; every timing is paired on fresh seeds",
            ),
        ),
        (
            f"{table}_min_pairs",
            _trigger(
                f"{table}_min_pairs",
                "BEFORE INSERT",
                table,
                f"{run_exists} AND NOT coalesce(NEW.n_pairs >= {_protocol_param('min_pairs')}, 0)",
                "min_pairs",
                "n_pairs is below the protocol minimum (protocols.min_pairs of the run); measure more pairs",
            ),
        ),
        (
            f"{table}_protocol_digest",
            _trigger(
                f"{table}_protocol_digest",
                "BEFORE INSERT",
                table,
                f"{run_exists} AND NEW.protocol_sha256 IS NOT {_run_field('protocol_sha256')}",
                "protocol_digest",
                "protocol_sha256 differs from the protocol of its run (runs.protocol_sha256)",
            ),
        ),
        (
            f"{table}_exploratory_flag",
            _trigger(
                f"{table}_exploratory_flag",
                "BEFORE INSERT",
                table,
                f"{run_exists} AND NEW.exploratory IS NOT {_run_field('exploratory')}",
                "exploratory_flag",
                "exploratory must equal the exploratory flag of its run (runs.exploratory)",
            ),
        ),
    ]
    if table == "results":
        max_speedup = _protocol_param("max_speedup")
        out.append(
            (
                "results_breaker",
                _trigger(
                    "results_breaker",
                    "BEFORE INSERT",
                    "results",
                    f"{run_exists} AND NOT coalesce((NEW.breaker = 'ok' AND NEW.speedup <= {max_speedup}) "
                    "OR (NEW.breaker GLOB 'released:[1-9]*' AND EXISTS (SELECT 1 FROM quarantine_releases AS rel "
                    "JOIN quarantine AS q ON q.id = rel.quarantine_id WHERE 'released:' || rel.id = NEW.breaker "
                    "AND q.problem = NEW.problem AND q.candidate_sha256 = NEW.candidate_sha256)), 0)",
                    "breaker",
                    "speedup is above the protocol breaker (protocols.max_speedup of the run) or breaker is not "
                    "ok; such a measurement goes to quarantine, and only a recorded release (breaker = released:ID "
                    "naming a quarantine_releases row for the same problem and candidate_sha256) lets it in",
                ),
            )
        )
    return out + _chain_triggers(table)


def _triggers() -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    # protocols: append-only
    for event in ("UPDATE", "DELETE"):
        name = f"protocols_append_only_{event.lower()}"
        out.append(
            (
                name,
                _trigger(
                    name,
                    f"BEFORE {event}",
                    "protocols",
                    None,
                    "protocols_append_only",
                    "protocols rows are never changed; a changed protocol is a new version with a new digest",
                ),
            )
        )
    # runs
    frozen_cols = [c for c, _, _ in COLUMNS["runs"] if c not in ("finished_at", "nonce")]
    unchanged = " AND ".join(f"NEW.{c} IS OLD.{c}" for c in frozen_cols)
    out += [
        (
            "runs_protocol_registered",
            _trigger(
                "runs_protocol_registered",
                "BEFORE INSERT",
                "runs",
                "NOT EXISTS (SELECT 1 FROM protocols WHERE sha256 = NEW.protocol_sha256 "
                "AND version = NEW.protocol_version)",
                "protocol_registered",
                "runs.protocol_sha256 and protocol_version must name a protocols row; register the protocol "
                "(ResultStore.register_protocol) before beginning the run",
            ),
        ),
        (
            "runs_start_open",
            _trigger(
                "runs_start_open",
                "BEFORE INSERT",
                "runs",
                "NEW.finished_at IS NOT NULL OR NEW.nonce IS NOT NULL",
                "run_starts_open",
                "a run is inserted unfinished (finished_at and nonce NULL); the nonce is revealed only at finish",
            ),
        ),
        (
            "runs_finish_once",
            _trigger(
                "runs_finish_once",
                "BEFORE UPDATE",
                "runs",
                "NOT coalesce(OLD.finished_at IS NULL AND OLD.nonce IS NULL AND NEW.finished_at IS NOT NULL "
                f"AND NEW.nonce IS NOT NULL AND {unchanged}, 0)",
                "runs_finish_once",
                "the only change allowed to a run is setting finished_at and nonce once, from NULL, at finish",
            ),
        ),
        (
            "runs_append_only_delete",
            _trigger(
                "runs_append_only_delete",
                "BEFORE DELETE",
                "runs",
                None,
                "runs_append_only",
                "runs rows are never deleted",
            ),
        ),
    ]
    out += _chain_triggers("runs")
    out += _measurement_triggers("results")
    out += _measurement_triggers("quarantine")
    # quarantine rows need a reason: a CHECK. rejections:
    out += [
        (
            "rejections_run_exists",
            _trigger(
                "rejections_run_exists",
                "BEFORE INSERT",
                "rejections",
                f"NOT {_run_exists()}",
                "run_exists",
                "rejections.run_id must name a row of runs; begin the run (ResultStore.begin_run) first",
            ),
        ),
        (
            "rejections_run_open",
            _trigger(
                "rejections_run_open",
                "BEFORE INSERT",
                "rejections",
                "EXISTS (SELECT 1 FROM runs WHERE run_id = NEW.run_id AND finished_at IS NOT NULL)",
                "run_open",
                "the run is finished (its nonce is revealed); rows can only be recorded while their run is open",
            ),
        ),
    ]
    out += _chain_triggers("rejections")
    out += [
        (
            "quarantine_releases_target",
            _trigger(
                "quarantine_releases_target",
                "BEFORE INSERT",
                "quarantine_releases",
                "NOT EXISTS (SELECT 1 FROM quarantine WHERE id = NEW.quarantine_id)",
                "release_target",
                "quarantine_id must name a quarantine row (see: autotune quarantine list)",
            ),
        ),
        (
            "quarantine_releases_once",
            _trigger(
                "quarantine_releases_once",
                "BEFORE INSERT",
                "quarantine_releases",
                "EXISTS (SELECT 1 FROM quarantine_releases WHERE quarantine_id = NEW.quarantine_id)",
                "release_once",
                "this quarantine row is already released; a release is recorded once",
            ),
        ),
    ]
    out += _chain_triggers("quarantine_releases")
    return out + _chain_state_guard(CHAINED_TABLES_0001)


def _chain_state_guard(chained: tuple[str, ...]) -> list[tuple[str, str]]:
    """chain_state: rows are seeded by the migrations; afterwards only the chain_advance triggers move them."""
    heads = " ".join(
        f"WHEN '{t}' THEN (SELECT row_hash FROM {t} WHERE rowid = (SELECT max(rowid) FROM {t}))"
        for t in chained
    )
    return [
        (
            "chain_state_advance_only",
            _trigger(
                "chain_state_advance_only",
                "BEFORE UPDATE",
                "chain_state",
                f"NOT coalesce(NEW.tbl = OLD.tbl AND NEW.count = OLD.count + 1 AND NEW.head = (CASE OLD.tbl {heads} END), 0)",
                "chain_state_guard",
                "chain_state only advances to the row_hash of the row just inserted",
            ),
        ),
        (
            "chain_state_no_insert",
            _trigger(
                "chain_state_no_insert",
                "BEFORE INSERT",
                "chain_state",
                None,
                "chain_state_guard",
                "chain_state has one row per chained table, created with the schema",
            ),
        ),
        (
            "chain_state_no_delete",
            _trigger(
                "chain_state_no_delete",
                "BEFORE DELETE",
                "chain_state",
                None,
                "chain_state_guard",
                "chain_state rows are never deleted",
            ),
        ),
    ]


def _retest_link_trigger() -> tuple[str, str]:
    # the id is read with CAST (primary-key lookup) and the text compared back, so 'results:07' or 'results:7x'
    # name no row
    valid = (
        "(SELECT o.problem = NEW.problem AND o.candidate = NEW.candidate AND o.device <> NEW.device "
        "AND o.speedup > 0 AND abs(NEW.transfer_ratio - NEW.speedup / o.speedup) "
        f"<= {TRANSFER_RATIO_RTOL!r} * abs(NEW.speedup / o.speedup) "
        "FROM results AS o WHERE o.id = CAST(substr(NEW.retest_of, 9) AS INTEGER) "
        "AND 'results:' || o.id = NEW.retest_of)"
    )
    return (
        "results_retest_link",
        _trigger(
            "results_retest_link",
            "BEFORE INSERT",
            "results",
            f"NEW.retest_of GLOB 'results:*' AND NEW.transfer_ratio IS NOT NULL AND NOT coalesce({valid}, 0)",
            "retest_link",
            "retest_of = results:ID must name an existing results row of the same problem and candidate on a "
            "different device, and transfer_ratio must be speedup / that row speedup (relative tolerance 1e-9)",
        ),
    )


def _provenance_triggers() -> list[tuple[str, str]]:
    """A measurement row must carry its provenance: the JSON names the very digests and seeds of the row
    (the run's provenance is on its runs row). Checked in the database, so a raw INSERT cannot skip it."""
    out = []
    for table in ("results", "quarantine"):
        complete = (
            "CASE WHEN json_valid(NEW.provenance) THEN (json_type(NEW.provenance) = 'object' "
            "AND json_extract(NEW.provenance, '$.problem_sha256') IS NEW.problem_sha256 "
            "AND json_extract(NEW.provenance, '$.candidate_sha256') IS NEW.candidate_sha256 "
            "AND json_extract(NEW.provenance, '$.baseline_sha256') IS NEW.baseline_sha256 "
            "AND json_type(NEW.provenance, '$.seeds') = 'array' "
            "AND json_type(NEW.provenance, '$.sizes') = 'object') ELSE 0 END"
        )
        # a malformed digest or provenance is left to its own CHECK (digests, provenance_json) to name
        own_ok = (" AND ".join(_hex64(f"NEW.{c}") for c in ("problem_sha256", "candidate_sha256", "baseline_sha256"))
                  + " AND json_valid(NEW.provenance) AND json_type(NEW.provenance) = 'object'")
        name = f"{table}_provenance_complete"
        out.append((name, _trigger(
            name, "BEFORE INSERT", table, f"{own_ok} AND NOT coalesce(({complete}), 0)", "provenance_complete",
            "provenance must be a JSON object naming this row problem_sha256, candidate_sha256 and "
            "baseline_sha256, with the seeds (array) and the sizes measured (object)",
        )))
    return out


#: tables as migration 0001 creates them
TABLES_0001: list[tuple[str, str]] = _tables()
#: triggers created by migration 0001
TRIGGERS_0001: list[tuple[str, str]] = _triggers()
#: triggers created by migration 0002_retest
TRIGGERS_0002: list[tuple[str, str]] = [_retest_link_trigger()]
def _epoch_triggers() -> list[tuple[str, str]]:
    out = []
    for event in ("UPDATE", "DELETE"):
        name = f"rule_epochs_append_only_{event.lower()}"
        out.append((name, _trigger(name, f"BEFORE {event}", "rule_epochs", None, "rule_epochs_append_only",
                                   "rule_epochs rows are never changed or deleted")))
    return out


#: triggers created by migration 0003_provenance
TRIGGERS_0003: list[tuple[str, str]] = _provenance_triggers() + _epoch_triggers()


#: the paired_seeds rule's predicate (as migration 0001 wrote it), for the engine rules' guard
_SEEDS_VALID = (
    "coalesce(CASE WHEN json_valid(NEW.seeds) THEN ("
    "CASE WHEN json_type(NEW.seeds) = 'array' THEN ("
    f"json_array_length(NEW.seeds) >= {_protocol_param('n_seeds')} "
    "AND NOT EXISTS (SELECT 1 FROM json_each(NEW.seeds) "
    "WHERE type <> 'integer' OR typeof(value) <> 'integer' OR value < 0) "
    "AND (SELECT count(DISTINCT value) FROM json_each(NEW.seeds)) = json_array_length(NEW.seeds)"
    ") ELSE 0 END) ELSE 0 END, 0)"
)


def _engine_triggers() -> list[tuple[str, str]]:
    """Engine rows (migration 0004_engine, docs/engines.md): a ratio is only ever between two launches of the SAME
    engine, driven by the SAME paired seeds. The arms are described in the row's provenance (``arms.baseline``,
    ``arms.candidate``: engine name and the seeds that decided its prompts); the row's problem is
    ``<engine>:<workload>``. Kernel rows are not concerned."""
    out = []
    for table in ("results", "quarantine"):
        engine = "json_extract(NEW.provenance, '$.arms.baseline.engine')"
        same_engine = (
            f"json_type(NEW.provenance, '$.arms.baseline.engine') = 'text' AND length({engine}) > 0 "
            f"AND json_type(NEW.provenance, '$.arms.candidate.engine') = 'text' "
            f"AND json_extract(NEW.provenance, '$.arms.candidate.engine') = {engine} "
            f"AND substr(NEW.problem, 1, length({engine}) + 1) = {engine} || ':'"
        )
        paired = (
            "json_type(NEW.provenance, '$.arms.baseline.seeds') = 'array' "
            "AND json_type(NEW.provenance, '$.arms.candidate.seeds') = 'array' "
            "AND json(json_extract(NEW.provenance, '$.arms.baseline.seeds')) = json(NEW.seeds) "
            "AND json(json_extract(NEW.provenance, '$.arms.candidate.seeds')) = json(NEW.seeds) "
            "AND json_array_length(NEW.seeds) > 0"
        )
        # judged only for an engine row whose JSON is valid and whose seeds pass paired_seeds (a malformed
        # provenance, or missing, too few or repeated seeds, are provenance_json's and paired_seeds' to name)
        valid_json = ("NEW.kind = 'engine' AND json_valid(NEW.provenance) AND json_type(NEW.provenance) = 'object' "
                      f"AND {_SEEDS_VALID}")
        name = f"{table}_engine_arms"
        out.append((name, _trigger(
            name, "BEFORE INSERT", table, f"{valid_json} AND NOT coalesce(({same_engine}), 0)", "engine_arms",
            "an engine row compares two launches of one engine: provenance arms.baseline.engine and "
            "arms.candidate.engine must name the same engine, and problem must read <engine>:<workload>",
        )))
        name = f"{table}_engine_paired_seeds"
        out.append((name, _trigger(
            name, "BEFORE INSERT", table, f"{valid_json} AND NOT coalesce(({paired}), 0)", "engine_paired_seeds",
            "an engine row needs paired seeds: provenance arms.baseline.seeds and arms.candidate.seeds must both be "
            "the row seeds (the same seeds decided the prompts of both arms)",
        )))
    return out


#: triggers created by migration 0004_engine
TRIGGERS_0004: list[tuple[str, str]] = _engine_triggers()

#: rules a later migration added to existing tables: rows with an id below the migration's rule_epochs.first_id
#: are replayed without them (migration 0002's retest rule only ever applies to rows that have a link)
EPOCH_RULES: dict[str, list[tuple[str, str]]] = {"0003_provenance": _provenance_triggers(),
                                                 "0004_engine": _engine_triggers()}

# ----------------------------------------------------------------------------------------------- 0005_study
# Studies (docs/studies.md). A study row (results, quarantine, rejections with study set) needs its study's
# registration recorded first: study_registrations holds what the pre-registration check found at the study's
# first row (registered, uncommitted or unregistered), MACed with the run's nonce like a measurement.
# study_verdicts holds every verdict `autotune study report` gave; one may read non-exploratory only when it names
# a 'registered' registration of its study whose entry digest is the one it was judged under.

_STUDY_NAME_CHARS = "'*[^A-Za-z0-9._:+-]*'"


def _study_name(col: str) -> str:
    return f"(length({col}) BETWEEN 1 AND 200 AND {col} NOT GLOB {_STUDY_NAME_CHARS})"


#: (column, definition for ``ALTER TABLE rejections ADD COLUMN``), in migration order
REJECTION_STUDY_COLUMN_DEFS: list[tuple[str, str]] = [
    ("study", "study TEXT"),
    ("arm", "arm TEXT"),
    ("iteration", "iteration INTEGER " + _column_check("iteration", "iteration IS NULL OR iteration >= 0")),
    ("candidate_sha256", "candidate_sha256 TEXT "
     + _column_check("rejection_digest", f"candidate_sha256 IS NULL OR {_hex64('candidate_sha256')}")),
]
#: ``results.remeasure_of``: "results:<id>", the row this one re-measures (``autotune remeasure``)
REMEASURE_RESULTS_PREFIX = "results:"
REMEASURE_COLUMN_DEFS: list[tuple[str, str]] = [
    ("remeasure_of", "remeasure_of TEXT " + _column_check(
        "remeasure_ref",
        "remeasure_of IS NULL OR (remeasure_of GLOB 'results:[1-9]*' AND substr(remeasure_of, 9) NOT GLOB "
        "'*[^0-9]*' AND length(remeasure_of) <= 26)")),
]

#: registration statuses: the entry was committed (HEAD) and unchanged in the working tree at the study's first
#: row / present but not committed (or differing from HEAD) / absent
REGISTRATION_STATUSES = ("registered", "uncommitted", "unregistered")


def _study_tables() -> list[tuple[str, str]]:
    registrations = _create_table(
        "study_registrations",
        [
            _check("registration_names", f"length(run_id) > 0 AND {_study_name('study')} AND length(registry) > 0 "
                                         "AND length(trim(detail)) > 0"),
            _check("registration_status", "status IN ('registered', 'uncommitted', 'unregistered')"),
            _check(
                "registration_entry",
                "CASE WHEN status = 'unregistered' THEN entry IS NULL AND entry_sha256 IS NULL AND git_commit IS NULL "
                f"ELSE ({_json_is('entry', 'object')}) AND {_hex64('entry_sha256')} "
                "AND (status <> 'registered' OR (length(git_commit) IN (40, 64) "
                "AND git_commit NOT GLOB '*[^0-9a-f]*')) END",
            ),
            _check("created_at", _timestamp("created_at")),
            _check("row_mac", _hex64("row_mac")),
            "  CONSTRAINT one_registration_per_study UNIQUE (study)",
        ],
    )
    verdicts = _create_table(
        "study_verdicts",
        [
            _check("verdict_flags", "exploratory IN (0, 1) AND plumbing_suspect IN (0, 1)"),
            _check(
                "verdict_kind",
                f"{_study_name('study')} AND (verdict IN ('supported', 'not supported') "
                "OR verdict GLOB 'saturated at ?*' OR verdict GLOB 'void: treatment not delivered*' "
                "OR verdict GLOB 'below usability bar*' OR verdict GLOB 'incomplete*')",
            ),
            _check(
                "verdict_label",
                "label = (CASE WHEN exploratory = 1 THEN 'exploratory: ' ELSE '' END) || verdict "
                "|| (CASE WHEN plumbing_suspect = 1 THEN ' [plumbing suspect]' ELSE '' END)",
            ),
            _check("verdict_digest", f"entry_sha256 IS NULL OR {_hex64('entry_sha256')}"),
            _check("verdict_report", _json_is("report", "object")),
            _check("created_at", _timestamp("created_at")),
        ],
    )
    return [("study_registrations", registrations), ("study_verdicts", verdicts)]


def _study_row_triggers() -> list[tuple[str, str]]:
    """Rules on results, quarantine and rejections rows that carry a study (the columns existed on results and
    quarantine since 0001; rejections got them in 0005)."""
    out = []
    for table in ("results", "quarantine", "rejections"):
        fields = (
            "(NEW.study IS NULL AND NEW.arm IS NULL AND NEW.iteration IS NULL) "
            f"OR ({_study_name('NEW.study')} AND {_study_name('NEW.arm')} "
            "AND (NEW.iteration IS NULL OR NEW.iteration >= 0))"
        )
        name = f"{table}_study_fields"
        out.append((name, _trigger(
            name, "BEFORE INSERT", table, f"NOT coalesce({fields}, 0)", "study_fields",
            "study and arm are both NULL (with iteration NULL) or both names of 1 to 200 characters from "
            "A-Z a-z 0-9 . _ : + - (iteration NULL or >= 0)")))
        name = f"{table}_study_registered_first"
        out.append((name, _trigger(
            name, "BEFORE INSERT", table,
            "NEW.study IS NOT NULL AND NOT EXISTS (SELECT 1 FROM study_registrations WHERE study = NEW.study)",
            "study_registered_first",
            "a row of a study needs the study registration (what the pre-registration check found) recorded "
            "before it: insert the study_registrations row first (pytest-autotune does, at the study first row)")))
    return out


def _remeasure_link_triggers() -> list[tuple[str, str]]:
    valid = (
        "(SELECT o.kind = NEW.kind AND o.problem = NEW.problem AND o.problem_sha256 = NEW.problem_sha256 "
        "AND o.candidate = NEW.candidate AND o.candidate_sha256 = NEW.candidate_sha256 AND o.device = NEW.device "
        "AND o.run_id <> NEW.run_id "
        "FROM results AS o WHERE o.id = CAST(substr(NEW.remeasure_of, 9) AS INTEGER) "
        "AND 'results:' || o.id = NEW.remeasure_of)"
    )
    return [
        ("results_remeasure_link", _trigger(
            "results_remeasure_link", "BEFORE INSERT", "results",
            # a malformed reference is left to the CHECK remeasure_ref to name
            "NEW.remeasure_of GLOB 'results:[1-9]*' AND substr(NEW.remeasure_of, 9) NOT GLOB '*[^0-9]*' "
            f"AND NOT coalesce({valid}, 0)", "remeasure_link",
            "remeasure_of = results:ID must name an existing results row of another run with the same kind, "
            "problem, problem_sha256, candidate, candidate_sha256 and device (a re-measurement re-times the same "
            "bytes on the same device)")),
        ("results_remeasure_once", _trigger(
            "results_remeasure_once", "BEFORE INSERT", "results",
            "NEW.remeasure_of IS NOT NULL AND EXISTS (SELECT 1 FROM results WHERE run_id = NEW.run_id "
            "AND remeasure_of = NEW.remeasure_of)", "remeasure_once",
            "this run already re-measured that results row; a row is re-measured once per run")),
    ]


def _study_table_triggers() -> list[tuple[str, str]]:
    out = [
        ("study_registrations_run_exists", _trigger(
            "study_registrations_run_exists", "BEFORE INSERT", "study_registrations", f"NOT {_run_exists()}",
            "run_exists", "study_registrations.run_id must name a row of runs; begin the run first")),
        ("study_registrations_run_open", _trigger(
            "study_registrations_run_open", "BEFORE INSERT", "study_registrations",
            "EXISTS (SELECT 1 FROM runs WHERE run_id = NEW.run_id AND finished_at IS NOT NULL)", "run_open",
            "the run is finished (its nonce is revealed); rows can only be recorded while their run is open")),
    ]
    out += _chain_triggers("study_registrations")
    out += [
        ("study_verdicts_registration", _trigger(
            "study_verdicts_registration", "BEFORE INSERT", "study_verdicts",
            "NEW.registration_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM study_registrations "
            "WHERE id = NEW.registration_id AND study = NEW.study)", "verdict_registration",
            "registration_id must be NULL or name the study_registrations row of the same study")),
        ("study_verdicts_exploratory", _trigger(
            "study_verdicts_exploratory", "BEFORE INSERT", "study_verdicts",
            "NEW.exploratory = 0 AND NOT EXISTS (SELECT 1 FROM study_registrations WHERE id = NEW.registration_id "
            "AND study = NEW.study AND status = 'registered' AND entry_sha256 = NEW.entry_sha256)",
            "verdict_exploratory",
            "a verdict reads exploratory unless its study was registered (committed) before its first row and "
            "judged under that same entry (registration_id and entry_sha256 naming a registered registration)")),
    ]
    out += _chain_triggers("study_verdicts")
    return out


#: tables created by migration 0005_study
TABLES_0005: list[tuple[str, str]] = _study_tables()
#: triggers created by migration 0005_study (besides the chain_state guard, re-created to know the new chains)
TRIGGERS_0005: list[tuple[str, str]] = _study_row_triggers() + _remeasure_link_triggers() + _study_table_triggers()
#: the chain_state guard after 0005: it knows every chain
CHAIN_STATE_GUARD: list[tuple[str, str]] = _chain_state_guard(CHAINED_TABLES)
EPOCH_RULES["0005_study"] = _study_row_triggers()

#: every table after the last migration (name, exact SQL as sqlite_master stores it)
TABLES: list[tuple[str, str]] = _final_tables()
#: every trigger after the last migration
_GUARD_NAMES = {name for name, _ in CHAIN_STATE_GUARD}
TRIGGERS: list[tuple[str, str]] = (
    [(n, s) for n, s in TRIGGERS_0001 if n not in _GUARD_NAMES] + TRIGGERS_0002 + TRIGGERS_0003 + TRIGGERS_0004
    + TRIGGERS_0005
    + CHAIN_STATE_GUARD
)

#: (type, name) -> exact SQL stored in sqlite_master once every migration is applied
EXPECTED_SCHEMA: dict[tuple[str, str], str] = {
    **{("table", name): sql for name, sql in TABLES},
    **{("trigger", name): sql for name, sql in TRIGGERS},
}

#: tables this schema owns (others in the file, like sqlite-utils' _sqlite_migrations, are ignored by verify)
OWN_TABLES = tuple(name for name, _ in TABLES)


def _constraint_names() -> list[str]:
    import re

    names: list[str] = []
    for _, sql in TABLES:
        for m in re.finditer(r"CONSTRAINT (\w+) CHECK", sql):
            if m.group(1) not in names:
                names.append(m.group(1))
    return names


def _trigger_rules() -> dict[str, str]:
    import re

    out = {}
    for name, sql in TRIGGERS:
        m = re.search(r"RAISE\(ABORT, '(\w+):", sql)
        if m:
            out[name] = m.group(1)
    return out


#: what each named CHECK constraint requires (the explanation ValidatorRefusal adds to SQLite's bare message)
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
    "retest_ref": "retest_of must be NULL, results:<id> (a results row id) or report:<non-empty reference>",
    "retest_pair": "retest_of and transfer_ratio are both NULL or both set",
    "transfer_ratio_positive": "transfer_ratio must be NULL or finite and > 0",
    # 0005_study
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

#: names of every CHECK constraint (also the rule name SQLite reports: "CHECK constraint failed: <name>")
CHECK_NAMES: list[str] = _constraint_names()
#: trigger name -> the rule name its RAISE message starts with
TRIGGER_RULES: dict[str, str] = _trigger_rules()


# ----------------------------------------------------------------------------------------------- migrations


@migrations(name="0001_initial")
def m0001_initial(db) -> None:
    """Tables, CHECK constraints, validator triggers, chain_state seeds. (Frozen: what schema 1 was.)"""
    for _, sql in TABLES_0001:
        db.execute(sql)
    for table in CHAINED_TABLES_0001:
        db.execute("INSERT INTO chain_state (tbl, head, count) VALUES (?, ?, 0)", [table, ZERO_HASH])
    # SQLite fires the BEFORE triggers of one event in reverse creation order (observed, not relied upon for
    # correctness): create them last-rule-first so that a raw insert is told about the most basic rule first
    for _, sql in reversed(TRIGGERS_0001):
        db.execute(sql)
    db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    db.execute("PRAGMA user_version = 1")


@migrations(name="0002_retest")
def m0002_retest(db) -> None:
    """The held-out retest link: results.retest_of, results.transfer_ratio (NULL on existing rows, which pass
    the new CHECKs) and the trigger results_retest_link."""
    for _, definition in RETEST_COLUMN_DEFS:
        db.execute(f"ALTER TABLE results ADD COLUMN {definition}")
    for _, sql in TRIGGERS_0002:
        db.execute(sql)
    db.execute("PRAGMA user_version = 2")


@migrations(name="0003_provenance")
def m0003_provenance(db) -> None:
    """Every results/quarantine row must carry its item provenance (digests, seeds, sizes) in its JSON."""
    db.execute(RULE_EPOCHS_SQL)
    for table in ("results", "quarantine"):
        db.execute("INSERT INTO rule_epochs (migration, tbl, first_id) "
                   f"SELECT '0003_provenance', '{table}', coalesce(max(id), 0) + 1 FROM {table}")
    for _, sql in TRIGGERS_0003:
        db.execute(sql)
    db.execute("PRAGMA user_version = 3")


@migrations(name="0004_engine")
def m0004_engine(db) -> None:
    """Engine rows: one engine for both arms, paired seeds for both arms (docs/engines.md)."""
    for table in ("results", "quarantine"):
        db.execute("INSERT INTO rule_epochs (migration, tbl, first_id) "
                   f"SELECT '0004_engine', '{table}', coalesce(max(id), 0) + 1 FROM {table}")
    # last-rule-first, as in 0001: a row without arms is told about engine_arms before engine_paired_seeds
    for _, sql in reversed(TRIGGERS_0004):
        db.execute(sql)
    db.execute("PRAGMA user_version = 4")


@migrations(name="0005_study")
def m0005_study(db) -> None:
    """Studies: study columns on rejections, the re-measure link on results, study_registrations,
    study_verdicts, their rules, and the chain_state guard re-created to know the two new chains."""
    for _, definition in REJECTION_STUDY_COLUMN_DEFS:
        db.execute(f"ALTER TABLE rejections ADD COLUMN {definition}")
    for _, definition in REMEASURE_COLUMN_DEFS:
        db.execute(f"ALTER TABLE results ADD COLUMN {definition}")
    for _, sql in TABLES_0005:
        db.execute(sql)
    for table in ("results", "quarantine", "rejections"):
        db.execute("INSERT INTO rule_epochs (migration, tbl, first_id) "
                   f"SELECT '0005_study', '{table}', coalesce(max(id), 0) + 1 FROM {table}")
    # the guard refuses new chain_state rows and knows only the chains of its time: re-create it
    for name, _ in CHAIN_STATE_GUARD:
        db.execute(f"DROP TRIGGER {name}")
    for table in CHAINED_TABLES:
        if table not in CHAINED_TABLES_0001:
            db.execute("INSERT INTO chain_state (tbl, head, count) VALUES (?, ?, 0)", [table, ZERO_HASH])
    for _, sql in reversed(TRIGGERS_0005 + CHAIN_STATE_GUARD):
        db.execute(sql)
    db.execute("PRAGMA user_version = 5")
