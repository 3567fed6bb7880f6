"""``ResultStore``: the one writer of the results database (the controller process).

Every write is one ``BEGIN IMMEDIATE`` transaction: read the chain head, compute ``row_hash`` (and ``row_mac``),
``INSERT`` through the database's own validator, read the row back, ``COMMIT``. The connection runs in WAL mode
with ``synchronous=FULL``, so a committed row survives a SIGKILL of the writer (and a power cut), and a killed
transaction leaves nothing behind.

``open`` never overwrites or "repairs" a file it cannot use safely: it raises :class:`StoreError` with the path,
what is wrong and what to do.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import os
import re
import sqlite3
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from ..errors import StoreError, ValidatorRefusal
from ..protocol import Protocol
from ..result import KernelResult, QuarantineRecord, Rejection, RunRecord
from . import schema
from .hashing import ZERO_HASH, canonical_row, nonce_commitment, row_hash, row_mac
from .schema import APPLICATION_ID, CHAINED_TABLES, COLUMN_TYPES, MAC_TABLES, OWN_TABLES, SCHEMA_VERSION

__all__ = ["ResultStore", "dry_run_insert", "refusal_from", "utc_now"]

_SQLITE_HEADER = b"SQLite format 3\x00"
_DEFAULT_BUSY_TIMEOUT_S = 5.0


def utc_now() -> str:
    """Timestamp format of created_at/released_at/finished_at/registered_at (ISO 8601, UTC, microseconds)."""
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="microseconds")


_RULE_PREFIX = re.compile(r"^([a-z_][a-z0-9_]*): ")


def rule_of(message: str) -> str:
    """The rule name in an SQLite constraint message (see docs/schema.md, "Error messages")."""
    if message.startswith("CHECK constraint failed: "):
        return message[len("CHECK constraint failed: ") :].strip()
    if message.startswith("NOT NULL constraint failed"):
        return "not_null"
    if message.startswith(("UNIQUE constraint failed", "PRIMARY KEY")):
        return "unique"
    if message.startswith("cannot store ") and " column " in message:
        return "datatype"
    if message.startswith("FOREIGN KEY"):
        return "foreign_key"
    m = _RULE_PREFIX.match(message)
    if m:
        return m.group(1)
    return "integrity"


def refusal_from(err: sqlite3.IntegrityError, table: str | None = None) -> ValidatorRefusal:
    """Turn the database validator's IntegrityError into :class:`ValidatorRefusal` naming the rule."""
    message = str(err)
    rule = rule_of(message)
    if rule == "datatype" or rule == "not_null" or rule == "unique":
        message = f"{rule}: {message}"
    elif message.startswith("CHECK constraint failed"):
        where = f" on {table}" if table else ""
        why = schema.CHECK_EXPLANATIONS.get(rule, "see docs/schema.md")
        message = f"{rule}: {why} (CHECK constraint {rule}{where})"
    return ValidatorRefusal(rule, message)


# ---------------------------------------------------------------------------------------------- opening


def _store_error_from(path: Path, err: sqlite3.Error, busy_timeout_s: float) -> StoreError:
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


def _check_file_before_open(p: Path, readonly: bool) -> None:
    if p.exists() and not p.is_file():
        raise StoreError(f"{p} is not a regular file (a directory?): pass the path of a .db file as --autotune-db")
    if not p.exists():
        if readonly:
            raise StoreError(
                f"{p} does not exist: record a run first (pytest --autotune) or pass the right --db / --autotune-db"
            )
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


def _inspect(conn: sqlite3.Connection, p: Path) -> int:
    """Read-only checks on an opened file. Returns its user_version."""
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    app_id = conn.execute("PRAGMA application_id").fetchone()[0]
    if version > SCHEMA_VERSION:
        raise StoreError(
            f"{p} was written by a newer pytest-autotune (schema {version} > {SCHEMA_VERSION}): upgrade "
            "pytest-autotune or use another --autotune-db"
        )
    tables = [
        r[0]
        for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name"
        )
    ]
    foreign = [t for t in tables if t not in OWN_TABLES and t != "_sqlite_migrations"]
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


# ---------------------------------------------------------------------------------------------- template


_TEMPLATE_LOCK = threading.Lock()
_TEMPLATE: sqlite3.Connection | None = None


def _apply_migrations(conn: sqlite3.Connection) -> None:
    import sqlite_utils

    db = sqlite_utils.Database(conn, execute_plugins=False)
    if not schema.migrations.pending(db):
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        # pending() again under the write lock: another process may have migrated meanwhile
        if schema.migrations.pending(db):
            schema.migrations.apply(db)
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def _memory_connection() -> sqlite3.Connection:
    """A private :memory: database with the full schema (copied from a per-process template)."""
    global _TEMPLATE
    with _TEMPLATE_LOCK:
        if _TEMPLATE is None:
            t = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
            _apply_migrations(t)
            _TEMPLATE = t
        conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
        _TEMPLATE.backup(conn)
    return conn


# ---------------------------------------------------------------------------------------------- the store


class ResultStore:
    """The results database. Open it with :meth:`open`; see docs/schema.md."""

    def __init__(
        self,
        conn: sqlite3.Connection,
        path: Path,
        *,
        readonly: bool,
        busy_timeout_s: float = _DEFAULT_BUSY_TIMEOUT_S,
    ) -> None:
        self._conn = conn
        self._busy_timeout_s = busy_timeout_s
        self._conn.row_factory = sqlite3.Row
        self.path = path
        self.readonly = readonly
        self._lock = threading.RLock()

    # -------------------------------------------------------------------------------------- open/close

    @classmethod
    def open(
        cls, path: str | os.PathLike, *, readonly: bool = False, busy_timeout_s: float = _DEFAULT_BUSY_TIMEOUT_S
    ) -> ResultStore:
        p = Path(path).expanduser().absolute()
        _check_file_before_open(p, readonly)
        if not readonly and not p.exists():
            try:
                p.parent.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise StoreError(
                    f"cannot create the directory {p.parent} for {p.name} ({e.strerror}): create it, or use "
                    "another --autotune-db"
                ) from e
            if not os.access(p.parent, os.W_OK):
                raise StoreError(
                    f"{p.parent} is not writable, so {p.name} cannot be created there: use another --autotune-db"
                )
        try:
            if readonly:
                conn = sqlite3.connect(
                    p.as_uri() + "?mode=ro",
                    uri=True,
                    timeout=busy_timeout_s,
                    isolation_level=None,
                    check_same_thread=False,
                )
            else:
                conn = sqlite3.connect(
                    str(p), timeout=busy_timeout_s, isolation_level=None, check_same_thread=False
                )
        except sqlite3.Error as e:
            raise _store_error_from(p, e, busy_timeout_s) from e
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")
            version = _inspect(conn, p)
            if readonly:
                if version < SCHEMA_VERSION:
                    raise StoreError(
                        f"{p} has schema {version}, older than this pytest-autotune's ({SCHEMA_VERSION}); it "
                        "needs migrating, which a read-only open does not do: open it once for writing "
                        "(pytest --autotune, or autotune merge into it)"
                    )
            else:
                mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
                if str(mode).lower() != "wal":  # pragma: no cover - filesystems without shared memory
                    conn.execute("PRAGMA journal_mode = DELETE")
                # FULL: each commit is fsynced to the WAL, so a committed row also survives a power cut
                conn.execute("PRAGMA synchronous = FULL")
                _apply_migrations(conn)
                # a long-held write lock (BEGIN EXCLUSIVE in a sqlite3 shell, a stuck writer) is refused now,
                # not at the first measurement
                conn.execute("BEGIN IMMEDIATE")
                conn.execute("ROLLBACK")
                version = conn.execute("PRAGMA user_version").fetchone()[0]
                if version != SCHEMA_VERSION:  # pragma: no cover - schema bug
                    raise StoreError(f"{p}: user_version {version} after migrating, expected {SCHEMA_VERSION}")
            conn.execute("PRAGMA foreign_keys = OFF")
        except StoreError:
            conn.close()
            raise
        except sqlite3.Error as e:
            conn.close()
            raise _store_error_from(p, e, busy_timeout_s) from e
        return cls(conn, p, readonly=readonly, busy_timeout_s=busy_timeout_s)

    @classmethod
    def _memory(cls) -> ResultStore:
        return cls(_memory_connection(), Path(":memory:"), readonly=False)

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"ResultStore({str(self.path)!r}{', readonly' if self.readonly else ''})"

    # -------------------------------------------------------------------------------------- transactions

    @contextlib.contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        if self.readonly:
            raise StoreError(f"{self.path} was opened read-only; open it with readonly=False to record")
        with self._lock:
            try:
                self._conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as e:
                raise _store_error_from(self.path, e, self._busy_timeout_s) from e
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
                    raise _store_error_from(self.path, e, self._busy_timeout_s) from e

    # -------------------------------------------------------------------------------------- writing

    def register_protocol(self, proto: Protocol, *, frozen: bool) -> None:
        """Insert the protocol's row unless one with its sha256 exists (the first registration wins)."""
        body = proto.text
        if hashlib.sha256(body.encode("utf-8")).hexdigest() != proto.sha256:
            raise StoreError(
                f"protocol {proto.path or proto.version!r}: its text does not hash to its sha256 {proto.sha256}; "
                "load it with pytest_autotune.protocol.load_protocol"
            )
        self._insert_protocol_row(
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

    def _insert_protocol_row(self, row: Mapping[str, Any]) -> bool:
        cols = list(COLUMN_TYPES["protocols"])
        with self._write() as conn:
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

    def insert_row(self, table: str, row: Mapping[str, Any], *, nonce: bytes | None) -> int:
        """Insert one row into a chained table in its own transaction; returns its rowid (``id``).

        ``created_at`` (``released_at``) is filled in when missing; ``prev_hash``/``row_hash`` are always computed
        here; ``row_mac`` is computed from ``nonce`` when given (else a ``row_mac`` in ``row`` is kept: merge).
        Raises :class:`ValidatorRefusal` when the database's validator refuses the row.
        """
        if table not in CHAINED_TABLES:
            raise StoreError(f"insert_row: {table!r} is not a table rows are recorded in; use one of {CHAINED_TABLES}")
        types = COLUMN_TYPES[table]
        unknown = sorted(set(row) - set(types))
        if unknown:
            raise ValidatorRefusal(
                "columns",
                f"columns: table {table} has no column {', '.join(unknown)}; see docs/schema.md for its columns",
            )
        data = {k: v for k, v in row.items() if k not in ("id", "prev_hash", "row_hash")}
        for stamp in ("created_at", "released_at"):
            if stamp in types and data.get(stamp) is None:
                data[stamp] = utc_now()
        if nonce is not None and not isinstance(nonce, (bytes, bytearray)):
            raise TypeError("nonce must be bytes")
        with self._write() as conn:
            head_row = conn.execute("SELECT head FROM chain_state WHERE tbl = ?", [table]).fetchone()
            head = head_row[0] if head_row else ZERO_HASH
            canonical = canonical_row(table, data)
            if table in MAC_TABLES and nonce is not None:
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
                raise _store_error_from(self.path, e, self._busy_timeout_s) from e
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
                    "values of the column types (docs/schema.md). Nothing was recorded"
                )
        assert rowid is not None
        return int(rowid)

    def finish_run(self, run_id: str, nonce: bytes) -> None:
        """Reveal the run's nonce and close it. Checks the commitment first; afterwards checks the run's row MACs
        and raises :class:`StoreError` if a row was not written with this nonce (a forged row)."""
        row = self._conn.execute("SELECT nonce_sha256, finished_at FROM runs WHERE run_id = ?", [run_id]).fetchone()
        if row is None:
            raise StoreError(f"run {run_id!r} is not in {self.path}: begin_run() it before finishing it")
        if row["finished_at"] is not None:
            raise StoreError(f"run {run_id!r} in {self.path} is already finished (at {row['finished_at']})")
        if nonce_commitment(bytes(nonce)) != row["nonce_sha256"]:
            raise StoreError(
                f"run {run_id!r}: the nonce does not match the commitment nonce_sha256 written at begin_run "
                "(sha256 of the raw nonce bytes); pass the run's own nonce"
            )
        self._finish(run_id, bytes(nonce).hex(), utc_now())
        bad = self._bad_macs(run_id, bytes(nonce))
        if bad:
            raise StoreError(
                f"run {run_id!r} finished, but {len(bad)} row(s) of it carry a row_mac not made with the run's "
                f"nonce: {', '.join(bad[:5])}; they were not written by this controller (run autotune verify)"
            )

    def _finish(self, run_id: str, nonce_hex: str, finished_at: str) -> None:
        with self._write() as conn:
            try:
                conn.execute(
                    "UPDATE runs SET finished_at = ?, nonce = ? WHERE run_id = ?", [finished_at, nonce_hex, run_id]
                )
            except sqlite3.IntegrityError as e:
                raise refusal_from(e, "runs") from e

    def _bad_macs(self, run_id: str, nonce: bytes) -> list[str]:
        bad = []
        present = {r[0] for r in self._conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        for table in MAC_TABLES:
            if table not in present:  # a store written before the migration that added the table
                continue
            for r in self._conn.execute(f"SELECT * FROM {table} WHERE run_id = ? ORDER BY id", [run_id]):
                if row_mac(nonce, canonical_row(table, dict(r))) != r["row_mac"]:
                    bad.append(f"{table} row {r['id']}")
        return bad

    def release_quarantine(self, quarantine_id: int, reason: str, released_by: str) -> int:
        """Record a release of a quarantine row (never silent: a reason of at least 10 characters and who).
        Returns the release id; a later result may then carry ``breaker = 'released:<id>'``."""
        return self.insert_row(
            "quarantine_releases",
            {"quarantine_id": quarantine_id, "reason": reason, "released_by": released_by},
            nonce=None,
        )

    # -------------------------------------------------------------------------------------- reading

    def verify(self):
        from .verify import verify_connection

        with self._lock:
            return verify_connection(self._conn, str(self.path))

    def quarantine_list(self) -> list[dict]:
        """Quarantine rows with their release: flat ``release_id``/``release_reason``/``released_by``/
        ``released_at`` (None when not released) and ``releases`` (a list of {id, reason, released_by,
        released_at}, at most one entry: a row is released once)."""
        rows = self._conn.execute(
            "SELECT q.*, rel.id AS release_id, rel.reason AS release_reason, rel.released_by AS released_by, "
            "rel.released_at AS released_at FROM quarantine AS q "
            "LEFT JOIN quarantine_releases AS rel ON rel.quarantine_id = q.id ORDER BY q.id"
        ).fetchall()
        out = []
        for r in rows:
            d = dict(r)
            d["releases"] = (
                [
                    {
                        "id": d["release_id"],
                        "reason": d["release_reason"],
                        "released_by": d["released_by"],
                        "released_at": d["released_at"],
                    }
                ]
                if d["release_id"] is not None
                else []
            )
            out.append(d)
        return out

    def results(self, run_id: str | None = None) -> list[dict]:
        if run_id is None:
            rows = self._conn.execute("SELECT * FROM results ORDER BY id").fetchall()
        else:
            rows = self._conn.execute("SELECT * FROM results WHERE run_id = ? ORDER BY id", [run_id]).fetchall()
        return [dict(r) for r in rows]

    def runs(self) -> list[dict]:
        return [dict(r) for r in self._conn.execute("SELECT * FROM runs ORDER BY rowid").fetchall()]

    def rejections(self, run_id: str | None = None) -> list[dict]:
        if run_id is None:
            rows = self._conn.execute("SELECT * FROM rejections ORDER BY id").fetchall()
        else:
            rows = self._conn.execute("SELECT * FROM rejections WHERE run_id = ? ORDER BY id", [run_id]).fetchall()
        return [dict(r) for r in rows]

    def protocol_body(self, sha256: str) -> str | None:
        """The protocol.toml text registered under ``sha256`` (None when unknown)."""
        row = self._conn.execute("SELECT body FROM protocols WHERE sha256 = ?", [sha256]).fetchone()
        return None if row is None else str(row[0])

    def has_run(self, run_id: str) -> bool:
        return self._conn.execute("SELECT 1 FROM runs WHERE run_id = ?", [run_id]).fetchone() is not None


def dry_run_insert(run: RunRecord, proto: Protocol, table: str, row: dict, *, nonce: bytes) -> None:
    """Validate ``row`` against the very same schema and triggers in a private :memory: database holding only
    ``proto`` and ``run``. Raises :class:`ValidatorRefusal` (rule, message) if the real insert would be refused.

    Rules that depend on other rows of the real database are checked against this one: the hash chain and "one row
    per item" trivially pass; a results row whose ``breaker`` is ``released:<id>`` is checked against a stand-in
    quarantine row and release with that id for the row's problem and candidate_sha256 (whether that release really
    exists is decided by the controller's insert into the real store); likewise a results row whose ``retest_of``
    is ``results:<id>`` is checked against a stand-in origin row with that id (same problem and candidate, another
    device, speedup = speedup / transfer_ratio); a row of a study is checked against a stand-in registration of
    its study (the controller records the real one before the study's first row)."""
    store = ResultStore._memory()
    try:
        store.register_protocol(proto, frozen=run.protocol_frozen)
        store.begin_run(run)
        breaker = row.get("breaker") if table == "results" else None
        m = re.fullmatch(r"released:([1-9][0-9]{0,17})", breaker) if isinstance(breaker, str) else None
        if m:
            _stand_in_release(store, row, int(m.group(1)), nonce)
        retest = row.get("retest_of") if table == "results" else None
        m = re.fullmatch(r"results:([1-9][0-9]{0,17})", retest) if isinstance(retest, str) else None
        if m:
            _stand_in_origin(store, row, int(m.group(1)), nonce)
        if isinstance(row.get("study"), str) and table != "study_registrations":
            _stand_in_registration(store, run.run_id, row["study"], nonce)
        store.insert_row(table, row, nonce=nonce if table in MAC_TABLES else None)
    finally:
        store.close()


def _stand_in_origin(store: ResultStore, row: dict, origin_id: int, nonce: bytes) -> None:
    ratio, speedup = row.get("transfer_ratio"), row.get("speedup")
    try:
        origin_speedup = float(speedup) / float(ratio)  # type: ignore[arg-type]
    except (TypeError, ValueError, ZeroDivisionError):
        return  # the real insert below reports the rule
    if not (origin_speedup > 0 and origin_speedup < float("inf")):
        return
    origin = {k: v for k, v in row.items() if k not in ("retest_of", "transfer_ratio", "breaker", "id")}
    origin.update(nodeid=f"{row.get('nodeid')}#dry-run-origin", device=f"{row.get('device')}#dry-run-origin",
                  speedup=origin_speedup, ci_low=origin_speedup, ci_high=origin_speedup, breaker="ok")
    with store._write() as conn:
        conn.execute("DELETE FROM sqlite_sequence WHERE name = 'results'")
        conn.execute("INSERT INTO sqlite_sequence (name, seq) VALUES ('results', ?)", [origin_id - 1])
    try:
        store.insert_row("results", origin, nonce=nonce)
    except ValidatorRefusal:
        return  # e.g. an origin above the breaker (released there): the real store decides


def _stand_in_release(store: ResultStore, row: dict, release_id: int, nonce: bytes) -> None:
    q = dict(row, nodeid=f"{row.get('nodeid')}#dry-run-quarantine", breaker="tripped",
             reason="dry run: stands in for the quarantine row the release names")
    try:
        qid = store.insert_row("quarantine", q, nonce=nonce)
    except ValidatorRefusal:
        return  # the row itself is invalid: the real insert below reports the rule
    with store._write() as conn:
        conn.execute("DELETE FROM sqlite_sequence WHERE name = 'quarantine_releases'")
        conn.execute("INSERT INTO sqlite_sequence (name, seq) VALUES ('quarantine_releases', ?)", [release_id - 1])
    store.release_quarantine(qid, "dry run: stands in for the release named by breaker", "dry-run")


def _stand_in_registration(store: ResultStore, run_id: str, study: str, nonce: bytes) -> None:
    try:
        store.insert_row("study_registrations", {
            "run_id": run_id, "study": study, "status": "unregistered", "registry": "dry-run",
            "detail": "dry run: stands in for the registration the controller records"}, nonce=nonce)
    except ValidatorRefusal:
        return  # an invalid study name: the real insert below reports the rule
