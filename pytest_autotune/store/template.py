"""The migrated template: every migration applied to a private ``:memory:`` database, once per process.

It is the one source of what a store must look like. ``verify`` compares a store's ``sqlite_master`` with the
template's (the exact SQL SQLite stored, ``ALTER TABLE ... ADD COLUMN`` splices included: nothing predicted), the
columns and their types are read from it (:mod:`.columns`), and the private stores of verify's replay and of
``dry_run_insert`` are copies of it.
"""

from __future__ import annotations

import re
import sqlite3
import threading
from dataclasses import dataclass

from .migrations import MIGRATIONS, migrations
from .sqlbuild import Column

__all__ = ["TemplateSchema", "apply_migrations", "memory_connection", "template_schema"]

_LOCK = threading.Lock()
_TEMPLATE: tuple[sqlite3.Connection, TemplateSchema] | None = None
#: tables in a store that are not the schema's own (sqlite-utils' migration record, SQLite's own)
_NOT_OWN = re.compile(r"^(sqlite_.*|_sqlite_migrations)$")


def apply_migrations(conn: sqlite3.Connection, *, stop_before: str | None = None) -> None:
    """Apply the pending migrations (up to ``stop_before``) under ``BEGIN IMMEDIATE``, so that two processes
    opening a new file do not race."""
    import sqlite_utils

    db = sqlite_utils.Database(conn, execute_plugins=False)
    if not migrations.pending(db):
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        # pending() again under the write lock: another process may have migrated meanwhile
        if migrations.pending(db):
            migrations.apply(db, stop_before=stop_before)
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


@dataclass(frozen=True)
class TemplateSchema:
    """What every migration together created, read back from the template's ``sqlite_master``."""

    #: own table -> its exact SQL, in creation order
    tables: dict[str, str]
    #: trigger -> (its table, its exact SQL), in creation order
    triggers: dict[str, tuple[str, str]]
    #: own table -> its columns (name, declared type, nullable), in table order
    columns: dict[str, list[Column]]
    #: own table -> the columns a later migration added to it (``ALTER TABLE ... ADD COLUMN``), in order
    added_columns: dict[str, tuple[str, ...]]

    @property
    def expected(self) -> dict[tuple[str, str], str]:
        """(type, name) -> exact SQL, for every table and trigger (what verify compares)."""
        return {**{("table", n): s for n, s in self.tables.items()},
                **{("trigger", n): s for n, (_, s) in self.triggers.items()}}

    @property
    def trigger_rules(self) -> dict[str, str]:
        """trigger -> the rule name its RAISE message starts with."""
        out = {}
        for name, (_, sql) in self.triggers.items():
            m = re.search(r"RAISE\(ABORT, '(\w+):", sql)
            if m:
                out[name] = m.group(1)
        return out

    @property
    def check_names(self) -> list[str]:
        """Every named CHECK constraint (the rule SQLite reports: ``CHECK constraint failed: <name>``)."""
        names: list[str] = []
        for sql in self.tables.values():
            for m in re.finditer(r"CONSTRAINT (\w+) CHECK", sql):
                if m.group(1) not in names:
                    names.append(m.group(1))
        return names


def _columns(conn: sqlite3.Connection, table: str) -> list[Column]:
    # PRAGMA table_info: (cid, name, type, notnull, default, pk); an INTEGER PRIMARY KEY is never NULL
    return [(r[1], r[2], not r[3] and not r[5]) for r in conn.execute(f"PRAGMA table_info({table})")]


def _own_tables(conn: sqlite3.Connection) -> list[str]:
    rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY rowid")
    return [r[0] for r in rows if not _NOT_OWN.match(r[0])]


def _build() -> tuple[sqlite3.Connection, TemplateSchema]:
    """Migrate a :memory: database one migration at a time, noting the columns each table had when created."""
    conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
    first: dict[str, list[str]] = {}
    names = [m.NAME for m in MIGRATIONS]
    for i in range(len(names)):
        apply_migrations(conn, stop_before=names[i + 1] if i + 1 < len(names) else None)
        for table in _own_tables(conn):
            first.setdefault(table, [c for c, _, _ in _columns(conn, table)])
    tables = {name: sql for name, sql in conn.execute(
        "SELECT name, sql FROM sqlite_master WHERE type = 'table' ORDER BY rowid") if not _NOT_OWN.match(name)}
    triggers = {name: (tbl, sql) for name, tbl, sql in conn.execute(
        "SELECT name, tbl_name, sql FROM sqlite_master WHERE type = 'trigger' ORDER BY rowid")}
    columns = {t: _columns(conn, t) for t in tables}
    added = {t: tuple(c for c, _, _ in cols if c not in first[t]) for t, cols in columns.items()}
    return conn, TemplateSchema(tables, triggers, columns, {t: a for t, a in added.items() if a})


def _template() -> tuple[sqlite3.Connection, TemplateSchema]:
    global _TEMPLATE
    with _LOCK:
        if _TEMPLATE is None:
            _TEMPLATE = _build()
        return _TEMPLATE


def template_schema() -> TemplateSchema:
    """The schema every store must have once migrated (built with the template, on first use)."""
    return _template()[1]


def memory_connection() -> sqlite3.Connection:
    """A private :memory: database with the full schema (a copy of the template)."""
    template = _template()[0]
    conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
    with _LOCK:
        template.backup(conn)
    return conn
