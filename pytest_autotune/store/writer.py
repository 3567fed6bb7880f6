"""The one way rows get into a store: :class:`StoreWriter` (docs/reference/store.md#files-transactions-crash-safety).

Every write is one ``BEGIN IMMEDIATE`` transaction: read the chain head, compute ``row_hash`` (and ``row_mac``),
``INSERT`` through the database's own validator, read the row back, ``COMMIT``; a killed transaction leaves
nothing behind. :class:`~.db.ResultStore` (a file) is a writer; so are the private in-memory copies of the
template that verify's replay and ``dry_run_insert`` write into.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import sqlite3
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from ..errors import StoreError, ValidatorRefusal
from ..protocol import Protocol
from ..result import KernelResult, QuarantineRecord, Rejection, RunRecord
from .columns import ZERO_HASH, chained_tables, column_types, mac_tables
from .hashing import canonical_row, nonce_commitment, row_hash, row_mac
from .opening import store_error_from
from .refusals import refusal_from
from .template import memory_connection

__all__ = ["DEFAULT_BUSY_TIMEOUT_S", "StoreReader", "StoreWriter", "utc_now"]

DEFAULT_BUSY_TIMEOUT_S = 5.0


def utc_now() -> str:
    """Timestamp format of created_at/released_at/finished_at/registered_at (ISO 8601, UTC, microseconds)."""
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="microseconds")


class StoreReader:
    """Read-only queries on an open store connection (rows as dicts)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        self._conn.row_factory = sqlite3.Row
        self._lock = threading.RLock()

    def select(self, sql: str, params: list[Any] | tuple[Any, ...] = ()) -> list[dict[str, Any]]:
        """Rows of a read-only query, as dicts."""
        with self._lock:
            return [dict(r) for r in self._conn.execute(sql, params).fetchall()]

    def select_one(self, sql: str, params: list[Any] | tuple[Any, ...] = ()) -> dict[str, Any] | None:
        """The first row of a read-only query, as a dict (None when there is none)."""
        with self._lock:
            r = self._conn.execute(sql, params).fetchone()
        return dict(r) if r is not None else None

    def has_run(self, run_id: str) -> bool:
        return self.select_one("SELECT 1 FROM runs WHERE run_id = ?", [run_id]) is not None


class StoreWriter(StoreReader):
    """Writes rows into an open store connection through its validator, and reads them back."""

    def __init__(
        self, conn: sqlite3.Connection, path: Path, *, readonly: bool, busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S
    ) -> None:
        super().__init__(conn)
        self._busy_timeout_s = busy_timeout_s
        self.path = path
        self.readonly = readonly

    @classmethod
    def in_memory(cls) -> StoreWriter:
        """A private :memory: store with the full schema (a copy of the template)."""
        return cls(memory_connection(), Path(":memory:"), readonly=False)

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -------------------------------------------------------------------------------------- transactions

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One ``BEGIN IMMEDIATE`` ... ``COMMIT`` (``ROLLBACK`` on any exception) on the store's connection."""
        if self.readonly:
            raise StoreError(f"{self.path} was opened read-only; open it with readonly=False to record")
        with self._lock:
            try:
                self._conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as e:
                raise store_error_from(self.path, e, self._busy_timeout_s) from e
            try:
                yield self._conn
            except BaseException:
                if self._conn.in_transaction:
                    self._conn.execute("ROLLBACK")
                raise
            else:
                try:
                    self._conn.execute("COMMIT")
                except sqlite3.Error as e:
                    if self._conn.in_transaction:
                        self._conn.execute("ROLLBACK")
                    raise store_error_from(self.path, e, self._busy_timeout_s) from e

    # -------------------------------------------------------------------------------------- writing

    def register_protocol(self, proto: Protocol, *, frozen: bool) -> None:
        """Insert the protocol's row unless one with its sha256 exists (the first registration wins)."""
        body = proto.text
        if hashlib.sha256(body.encode("utf-8")).hexdigest() != proto.sha256:
            raise StoreError(
                f"protocol {proto.path or proto.version!r}: its text does not hash to its sha256 {proto.sha256}; "
                "load it with pytest_autotune.protocol.load_protocol"
            )
        self.insert_protocol(
            {
                "sha256": proto.sha256,
                "version": proto.version,
                "frozen": int(bool(frozen)),
                "n_seeds": proto.seeds.count,
                "min_pairs": proto.timing.min_pairs,
                "max_speedup": proto.breaker.max_speedup,
                "body": body,
                "registered_at": utc_now(),
            }
        )

    def insert_protocol(self, row: Mapping[str, Any]) -> bool:
        """Insert a ``protocols`` row as given unless one with its sha256 exists; True when inserted."""
        cols = list(column_types("protocols"))
        with self.transaction() as conn:
            if conn.execute("SELECT 1 FROM protocols WHERE sha256 = ?", [row["sha256"]]).fetchone():
                return False
            try:
                conn.execute(
                    f"INSERT INTO protocols ({', '.join(cols)}) VALUES ({', '.join('?' for _ in cols)})",
                    [row.get(c) for c in cols],
                )
            except sqlite3.IntegrityError as e:
                raise refusal_from(e, "protocols") from e
        return True

    def begin_run(self, run: RunRecord) -> None:
        """Insert the run (unfinished): its ``nonce_sha256`` commits to the nonce revealed by :meth:`finish_run`."""
        self.insert_row("runs", run.as_row(), nonce=None)

    def record_result(self, result: KernelResult, *, nonce: bytes) -> int:
        return self.insert_row("results", result.as_row(), nonce=nonce)

    def record_quarantine(self, q: QuarantineRecord, *, nonce: bytes) -> int:
        return self.insert_row("quarantine", q.as_row(), nonce=nonce)

    def record_rejection(self, r: Rejection) -> int:
        return self.insert_row("rejections", r.as_row(), nonce=None)

    def release_quarantine(self, quarantine_id: int, reason: str, released_by: str) -> int:
        """Record a release of a quarantine row (never silent: a reason of at least 10 characters and who).
        Returns the release id; a later result may then carry ``breaker = 'released:<id>'``."""
        return self.insert_row(
            "quarantine_releases",
            {"quarantine_id": quarantine_id, "reason": reason, "released_by": released_by},
            nonce=None,
        )

    def insert_row(self, table: str, row: Mapping[str, Any], *, nonce: bytes | None) -> int:
        """Insert one row into a chained table in its own transaction; returns its rowid (``id``).

        ``created_at`` (``released_at``) is filled in when missing; ``prev_hash``/``row_hash`` are always computed
        here; ``row_mac`` is computed from ``nonce`` when given (else a ``row_mac`` in ``row`` is kept: merge).
        Raises :class:`ValidatorRefusal` when the database's validator refuses the row.
        """
        chained = chained_tables()
        if table not in chained:
            raise StoreError(f"insert_row: {table!r} is not a table rows are recorded in; use one of {chained}")
        types = column_types(table)
        unknown = sorted(set(row) - set(types))
        if unknown:
            raise ValidatorRefusal(
                "columns",
                f"columns: table {table} has no column {', '.join(unknown)}; see docs/reference/store.md for its columns",
            )
        data = {k: v for k, v in row.items() if k not in ("id", "prev_hash", "row_hash")}
        for stamp in ("created_at", "released_at"):
            if stamp in types and data.get(stamp) is None:
                data[stamp] = utc_now()
        if nonce is not None and not isinstance(nonce, (bytes, bytearray)):
            raise TypeError("nonce must be bytes")
        with self.transaction() as conn:
            head_row = conn.execute("SELECT head FROM chain_state WHERE tbl = ?", [table]).fetchone()
            head = head_row[0] if head_row else ZERO_HASH
            canonical = canonical_row(table, data)
            if table in mac_tables() and nonce is not None:
                data["row_mac"] = row_mac(bytes(nonce), canonical)
            data["prev_hash"] = head
            data["row_hash"] = row_hash(head, canonical)
            cols = list(data)
            try:
                cur = conn.execute(
                    f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join('?' for _ in cols)})",
                    [data[c] for c in cols],
                )
            except sqlite3.IntegrityError as e:
                raise refusal_from(e, table) from e
            except sqlite3.OperationalError as e:
                if "has no column" in str(e):
                    raise ValidatorRefusal("columns", f"columns: {e}") from e
                raise store_error_from(self.path, e, self._busy_timeout_s) from e
            rowid = cur.lastrowid
            back = conn.execute(f"SELECT * FROM {table} WHERE rowid = ?", [rowid]).fetchone()
            if canonical_row(table, dict(back)) != canonical:
                changed = [
                    c
                    for c in types
                    if c in data and c not in ("prev_hash", "row_hash", "row_mac") and back[c] != data[c]
                ]
                raise StoreError(
                    f"{self.path}: the {table} row reads back differently from what was written (column(s) "
                    f"{', '.join(changed) or '?'} were converted by SQLite), so its hash would not verify; pass "
                    "values of the column types (docs/reference/store.md). Nothing was recorded"
                )
        assert rowid is not None
        return int(rowid)

    def finish_run(self, run_id: str, nonce: bytes) -> None:
        """Reveal the run's nonce and close it. Checks the commitment first; afterwards checks the run's row MACs
        and raises :class:`StoreError` if a row was not written with this nonce (a forged row)."""
        row = self.select_one("SELECT nonce_sha256, finished_at FROM runs WHERE run_id = ?", [run_id])
        if row is None:
            raise StoreError(f"run {run_id!r} is not in {self.path}: begin_run() it before finishing it")
        if row["finished_at"] is not None:
            raise StoreError(f"run {run_id!r} in {self.path} is already finished (at {row['finished_at']})")
        if nonce_commitment(bytes(nonce)) != row["nonce_sha256"]:
            raise StoreError(
                f"run {run_id!r}: the nonce does not match the commitment nonce_sha256 written at begin_run "
                "(sha256 of the raw nonce bytes); pass the run's own nonce"
            )
        self.record_finish(run_id, bytes(nonce).hex(), utc_now())
        bad = self.bad_macs(run_id, bytes(nonce))
        if bad:
            raise StoreError(
                f"run {run_id!r} finished, but {len(bad)} row(s) of it carry a row_mac not made with the run's "
                f"nonce: {', '.join(bad[:5])}; they were not written by this controller (run autotune verify)"
            )

    def record_finish(self, run_id: str, nonce_hex: str, finished_at: str) -> None:
        """Set a run's ``finished_at`` and revealed ``nonce`` as given, through the validator (``runs_finish_once``),
        with no check of the commitment: merge copies a finish that its source recorded."""
        with self.transaction() as conn:
            try:
                conn.execute(
                    "UPDATE runs SET finished_at = ?, nonce = ? WHERE run_id = ?", [finished_at, nonce_hex, run_id]
                )
            except sqlite3.IntegrityError as e:
                raise refusal_from(e, "runs") from e

    def bad_macs(self, run_id: str, nonce: bytes) -> list[str]:
        """``"<table> row <id>"`` for each row of ``run_id`` whose row_mac was not made with ``nonce``."""
        bad = []
        present = {r["name"] for r in self.select("SELECT name FROM sqlite_master WHERE type = 'table'")}
        for table in mac_tables():
            if table not in present:  # a store written before the migration that added the table
                continue
            for r in self.select(f"SELECT * FROM {table} WHERE run_id = ? ORDER BY id", [run_id]):
                if row_mac(nonce, canonical_row(table, r)) != r["row_mac"]:
                    bad.append(f"{table} row {r['id']}")
        return bad
