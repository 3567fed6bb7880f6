"""Checks before and while a store file is opened (docs/reference/store.md#opening-a-store-what-is-refused).

Nothing here writes: a file that is refused is left exactly as it was, and every refusal is a :class:`StoreError`
naming the path, what is wrong and what to do.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from ..errors import StoreError
from .migrations import APPLICATION_ID
from .template import template_schema

__all__ = ["check_file", "connect", "inspect_store", "store_error_from"]

_SQLITE_HEADER = b"SQLite format 3\x00"


def store_error_from(path: Path, err: sqlite3.Error, busy_timeout_s: float) -> StoreError:
    """An SQLite error on ``path`` as a :class:`StoreError` that says what to do."""
    msg = str(err)
    low = msg.lower()
    if "locked" in low or "busy" in low:
        return StoreError(
            f"{path} is locked by another writer (another pytest --autotune session, or a sqlite3 shell holding "
            f"a write transaction, kept it locked for more than {busy_timeout_s:g}s): let it finish or close it, "
            "or use another --autotune-db"
        )
    if "readonly" in low or "read-only" in low or "read only" in low:
        return StoreError(
            f"{path} is read-only ({msg}): make the file and its directory writable, or use another "
            "--autotune-db; the file was not modified"
        )
    if "not a database" in low or "malformed" in low or "corrupt" in low:
        return StoreError(
            f"{path} is not a usable SQLite database ({msg}); it was left untouched: move it away or restore it "
            "from a copy, or use another --autotune-db"
        )
    if "unable to open" in low:
        return StoreError(
            f"{path} cannot be opened ({msg}): check that its directory exists and is readable and writable, "
            "or use another --autotune-db"
        )
    return StoreError(f"{path}: SQLite error {msg!r}; the file was left as it was: use another --autotune-db")


def check_file(p: Path, readonly: bool) -> None:
    """Before SQLite touches ``p``: a regular file with the SQLite header that we may write (or, for a new store, a
    directory we may create it in)."""
    if p.exists() and not p.is_file():
        raise StoreError(f"{p} is not a regular file (a directory?): pass the path of a .db file as --autotune-db")
    if not p.exists():
        if readonly:
            raise StoreError(
                f"{p} does not exist: record a run first (pytest --autotune) or pass the right --db / --autotune-db"
            )
        _make_parent(p)
        return
    try:
        with open(p, "rb") as fh:
            head = fh.read(len(_SQLITE_HEADER))
    except OSError as e:
        raise StoreError(f"{p} cannot be read ({e.strerror}): fix its permissions or use another --autotune-db") from e
    if head and head != _SQLITE_HEADER:
        raise StoreError(
            f"{p} is not a SQLite database (its first bytes are not the SQLite header; corrupt or another kind of "
            "file); it was left untouched: move it away or use another --autotune-db"
        )
    if not readonly:
        # os.access honours permission bits for ordinary users and the immutable attribute even for root
        if not os.access(p, os.W_OK):
            raise StoreError(
                f"{p} is read-only (no write permission on the file): make it writable (chmod u+w) or use "
                "another --autotune-db; the file was not modified"
            )
        if not os.access(p.parent, os.W_OK):
            raise StoreError(
                f"{p.parent} (the directory of {p.name}) is not writable, and SQLite must create {p.name}-wal and "
                f"{p.name}-shm next to the database: make the directory writable or use another --autotune-db; "
                "the file was not modified"
            )


def _make_parent(p: Path) -> None:
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise StoreError(
            f"cannot create the directory {p.parent} for {p.name} ({e.strerror}): create it, or use "
            "another --autotune-db"
        ) from e
    if not os.access(p.parent, os.W_OK):
        raise StoreError(f"{p.parent} is not writable, so {p.name} cannot be created there: use another --autotune-db")


def connect(p: Path, readonly: bool, busy_timeout_s: float) -> sqlite3.Connection:
    """Open ``p`` (read-only: ``mode=ro``, so nothing is created or written) in autocommit mode."""
    try:
        if readonly:
            conn = sqlite3.connect(p.as_uri() + "?mode=ro", uri=True, timeout=busy_timeout_s, isolation_level=None,
                                   check_same_thread=False)
        else:
            conn = sqlite3.connect(str(p), timeout=busy_timeout_s, isolation_level=None, check_same_thread=False)
    except sqlite3.Error as e:
        raise store_error_from(p, e, busy_timeout_s) from e
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")
    except sqlite3.Error as e:
        conn.close()
        raise store_error_from(p, e, busy_timeout_s) from e
    return conn


def inspect_store(conn: sqlite3.Connection, p: Path, schema_version: int) -> int:
    """Read-only checks on an opened file: a store (or an empty file) of at most ``schema_version``, not damaged.
    Returns its user_version."""
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    app_id = conn.execute("PRAGMA application_id").fetchone()[0]
    if version > schema_version:
        raise StoreError(
            f"{p} was written by a newer pytest-autotune (schema {version} > {schema_version}): upgrade "
            "pytest-autotune or use another --autotune-db"
        )
    tables = [
        r[0]
        for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name"
        )
    ]
    own = template_schema().tables
    foreign = [t for t in tables if t not in own and t != "_sqlite_migrations"]
    if app_id not in (0, APPLICATION_ID) or (foreign and (version == 0 or app_id != APPLICATION_ID)):
        raise StoreError(
            f"{p} is a SQLite database but not a pytest-autotune results store (tables: "
            f"{', '.join(tables) or 'none'}; application_id {app_id}); it was left untouched: use another "
            "--autotune-db"
        )
    check = [r[0] for r in conn.execute("PRAGMA quick_check").fetchall()]
    if check != ["ok"]:
        raise StoreError(
            f"{p} is corrupt (PRAGMA quick_check: {'; '.join(check[:3])}); it was left untouched: restore it "
            "from a copy, or move it away and start a new store with another --autotune-db"
        )
    return version

