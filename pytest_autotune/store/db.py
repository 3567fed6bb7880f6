"""``ResultStore``: a results database file, opened for the controller (the one writer) or read-only.

``open`` never overwrites or "repairs" a file it cannot use safely: it raises :class:`StoreError` with the path,
what is wrong and what to do (the checks are :mod:`.opening`). Opened for writing, the file is migrated in place,
runs in WAL mode with ``synchronous=FULL`` (a committed row survives a SIGKILL of the writer and a power cut), and
is written through :class:`~.writer.StoreWriter`'s one-transaction-per-row inserts.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

from ..errors import StoreError
from .migrations import SCHEMA_VERSION
from .opening import check_file, connect, inspect_store, store_error_from
from .template import apply_migrations as _apply_migrations
from .template import memory_connection
from .verify import VerifyReport, verify_connection
from .writer import DEFAULT_BUSY_TIMEOUT_S, StoreWriter

__all__ = ["ResultStore"]

# SCHEMA_VERSION and _apply_migrations are looked up in this module each time a store is opened (tests write
# stores of an older schema by replacing them)


class ResultStore(StoreWriter):
    """The results database. Open it with :meth:`open`; see docs/reference/store.md."""

    @classmethod
    def open(
        cls, path: str | os.PathLike, *, readonly: bool = False, busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S
    ) -> ResultStore:
        p = Path(path).expanduser().absolute()
        check_file(p, readonly)
        conn = connect(p, readonly, busy_timeout_s)
        try:
            version = inspect_store(conn, p, SCHEMA_VERSION)
            if readonly:
                if version < SCHEMA_VERSION:
                    raise StoreError(
                        f"{p} has schema {version}, older than this pytest-autotune's ({SCHEMA_VERSION}); it "
                        "needs migrating, which a read-only open does not do: open it once for writing "
                        "(pytest --autotune, or autotune merge into it)"
                    )
            else:
                _prepare_for_writing(conn, p)
            conn.execute("PRAGMA foreign_keys = OFF")
        except StoreError:
            conn.close()
            raise
        except sqlite3.Error as e:
            conn.close()
            raise store_error_from(p, e, busy_timeout_s) from e
        return cls(conn, p, readonly=readonly, busy_timeout_s=busy_timeout_s)

    @classmethod
    def _memory(cls) -> ResultStore:
        """A private :memory: store with the full schema (a copy of the migrated template)."""
        return cls(memory_connection(), Path(":memory:"), readonly=False)

    def __repr__(self) -> str:
        return f"ResultStore({str(self.path)!r}{', readonly' if self.readonly else ''})"

    # -------------------------------------------------------------------------------------- reading

    def verify(self) -> VerifyReport:
        """``autotune verify`` on this store (docs/reference/store.md#verify)."""
        with self._lock:
            return verify_connection(self._conn, str(self.path))

    def quarantine_list(self) -> list[dict[str, Any]]:
        """Quarantine rows with their release: flat ``release_id``/``release_reason``/``released_by``/
        ``released_at`` (None when not released) and ``releases`` (a list of {id, reason, released_by,
        released_at}, at most one entry: a row is released once)."""
        rows = self.select(
            "SELECT q.*, rel.id AS release_id, rel.reason AS release_reason, rel.released_by AS released_by, "
            "rel.released_at AS released_at FROM quarantine AS q "
            "LEFT JOIN quarantine_releases AS rel ON rel.quarantine_id = q.id ORDER BY q.id"
        )
        for d in rows:
            d["releases"] = (
                [{"id": d["release_id"], "reason": d["release_reason"], "released_by": d["released_by"],
                  "released_at": d["released_at"]}]
                if d["release_id"] is not None
                else []
            )
        return rows

    def results(self, run_id: str | None = None) -> list[dict[str, Any]]:
        if run_id is None:
            return self.select("SELECT * FROM results ORDER BY id")
        return self.select("SELECT * FROM results WHERE run_id = ? ORDER BY id", [run_id])

    def runs(self) -> list[dict[str, Any]]:
        return self.select("SELECT * FROM runs ORDER BY rowid")

    def rejections(self, run_id: str | None = None) -> list[dict[str, Any]]:
        if run_id is None:
            return self.select("SELECT * FROM rejections ORDER BY id")
        return self.select("SELECT * FROM rejections WHERE run_id = ? ORDER BY id", [run_id])

    def protocol_body(self, sha256: str) -> str | None:
        """The protocol.toml text registered under ``sha256`` (None when unknown)."""
        row = self.select_one("SELECT body FROM protocols WHERE sha256 = ?", [sha256])
        return None if row is None else str(row["body"])


def _prepare_for_writing(conn: sqlite3.Connection, p: Path) -> None:
    mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
    if str(mode).lower() != "wal":  # pragma: no cover - filesystems without shared memory
        conn.execute("PRAGMA journal_mode = DELETE")
    # FULL: each commit is fsynced to the WAL, so a committed row also survives a power cut
    conn.execute("PRAGMA synchronous = FULL")
    _apply_migrations(conn)
    # a long-held write lock (BEGIN EXCLUSIVE in a sqlite3 shell, a stuck writer) is refused now, not at the first
    # measurement
    conn.execute("BEGIN IMMEDIATE")
    conn.execute("ROLLBACK")
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version != SCHEMA_VERSION:  # pragma: no cover - schema bug
        raise StoreError(f"{p}: user_version {version} after migrating, expected {SCHEMA_VERSION}")
