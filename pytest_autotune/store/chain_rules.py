"""The hash chain's rules in the database (docs/reference/store.md#hash-chains-and-macs): each chained table checks
``prev_hash`` against ``chain_state.head`` and advances it, is append-only, and ``chain_state`` itself only ever
advances. Also the ``rule_epochs`` rows a migration that adds a rule to an existing table writes.

Part of what migrations execute (see :mod:`.sqlbuild`): change only by adding functions.
"""

from __future__ import annotations

from typing import Any

from .sqlbuild import hex64, trigger

#: prev_hash of the first row of every chain (and chain_state.head of an empty table)
ZERO_HASH = "0" * 64

#: (trigger name, its exact SQL)
Named = tuple[str, str]


def chain_triggers(table: str) -> list[Named]:
    """``<table>_hash_chain`` and ``<table>_chain_advance``; for every table but runs also append-only."""
    out: list[Named] = [
        (
            f"{table}_hash_chain",
            trigger(
                f"{table}_hash_chain",
                "BEFORE INSERT",
                table,
                f"NOT coalesce(NEW.prev_hash = (SELECT head FROM chain_state WHERE tbl = '{table}') "
                f"AND {hex64('NEW.row_hash')} AND NEW.row_hash <> NEW.prev_hash, 0)",
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
    ]
    if table == "runs":  # runs are updated once, at finish (runs_finish_once)
        return out
    for event, verb in (("update", "never updated; record a new row instead"),
                        ("delete", "never deleted; the history is append-only")):
        name = f"{table}_append_only_{event}"
        out.append((name, trigger(name, f"BEFORE {event.upper()}", table, None, f"{table}_append_only",
                                  f"{table} rows are {verb}")))
    return out


def chain_state_guard(chained: tuple[str, ...]) -> list[Named]:
    """chain_state: rows are seeded by the migrations; afterwards only the chain_advance triggers move them."""
    heads = " ".join(
        f"WHEN '{t}' THEN (SELECT row_hash FROM {t} WHERE rowid = (SELECT max(rowid) FROM {t}))"
        for t in chained
    )
    return [
        (
            "chain_state_advance_only",
            trigger(
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
            trigger("chain_state_no_insert", "BEFORE INSERT", "chain_state", None, "chain_state_guard",
                    "chain_state has one row per chained table, created with the schema"),
        ),
        (
            "chain_state_no_delete",
            trigger("chain_state_no_delete", "BEFORE DELETE", "chain_state", None, "chain_state_guard",
                    "chain_state rows are never deleted"),
        ),
    ]


def seed_chain_state(db: Any, tables: tuple[str, ...]) -> None:
    """One chain_state row per new chain (run while the guard is absent: it refuses inserts)."""
    for table in tables:
        db.execute("INSERT INTO chain_state (tbl, head, count) VALUES (?, ?, 0)", [table, ZERO_HASH])


def record_epochs(db: Any, migration: str, tables: tuple[str, ...]) -> None:
    """``rule_epochs`` rows: the rules ``migration`` adds to ``tables`` judge rows from the next id on (verify's
    replay judges older rows without them). An id, not a timestamp: a forger can backdate created_at, not the id of
    a row appended after the migration."""
    for table in tables:
        db.execute("INSERT INTO rule_epochs (migration, tbl, first_id) "
                   f"SELECT '{migration}', '{table}', coalesce(max(id), 0) + 1 FROM {table}")
