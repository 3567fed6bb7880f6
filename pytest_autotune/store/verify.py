"""``autotune verify``: is the database what the validator and the hash chains say it should be?

Checks, in order (each failure is a *problem*; things that are fine but worth knowing are *notes*):

1. ``PRAGMA integrity_check``.
2. ``user_version`` is this package's ``SCHEMA_VERSION``.
3. every table and trigger of the schema exists with its exact SQL, as the migrated template stores it (a dropped
   or edited trigger means the validator was bypassable), and no unknown trigger sits on the store's tables.
4. every ``protocols`` row: sha256(body) is its key and the parameters the validator reads match the body.
5. every hash chain (runs, results, quarantine, rejections, quarantine_releases): each ``row_hash`` recomputed
   from the row's content, each ``prev_hash`` the previous row's ``row_hash``, and ``chain_state`` (head and
   count, maintained by triggers) agrees with the last row -- so an edited, deleted or reordered row is reported.
6. finished runs: ``sha256(nonce) == nonce_sha256`` (the commitment), and every results/quarantine row of the
   run carries ``row_mac = HMAC(nonce, canonical row)``. Unfinished runs (killed writer) are a note.
7. replay: every row is inserted again, in order, into a private in-memory database through the current
   validator. A row the validator refuses there got in while the validator was bypassed.
"""

from __future__ import annotations

import hashlib
import sqlite3
from dataclasses import dataclass, field

from ..errors import ProtocolError
from ..protocol import parse_protocol
from .columns import ZERO_HASH, chained_tables, mac_tables, own_tables
from .hashing import canonical_row, nonce_commitment, row_hash, row_mac
from .migrations import SCHEMA_VERSION
from .replay import replay_problems
from .template import template_schema

__all__ = ["VerifyReport", "verify_connection"]


@dataclass
class VerifyReport:
    ok: bool
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    counts: dict = field(default_factory=dict)

    def render(self) -> str:
        lines = []
        counts = ", ".join(f"{k} {v}" for k, v in self.counts.items())
        lines.append(f"{'OK' if self.ok else 'FAILED'}: {counts}")
        for p in self.problems:
            lines.append(f"problem: {p}")
        for n in self.notes:
            lines.append(f"note: {n}")
        return "\n".join(lines)


def _row_label(table: str, row: sqlite3.Row | dict) -> str:
    if table == "runs":
        return f"runs row {row['_rowid_']} (run {row['run_id']})"
    return f"{table} row {row['id']}"


def _check_schema(conn: sqlite3.Connection, problems: list[str]) -> set[str]:
    """Returns the tables that exist (the others are skipped below)."""
    actual = {
        (r[0], r[1]): (r[2], r[3])
        for r in conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master WHERE type IN ('table', 'trigger')")
    }
    schema = template_schema()
    expected = schema.expected
    rules = schema.trigger_rules
    own = own_tables()
    for (kind, name), sql in expected.items():
        got = actual.get((kind, name))
        what = f"rule {rules[name]}" if kind == "trigger" and name in rules else "the hash chain"
        if got is None:
            if kind == "trigger":
                problems.append(f"trigger {name} is missing (dropped?): {what} is not enforced by the database")
            else:
                problems.append(f"table {name} is missing")
        elif got[1] != sql:
            problems.append(
                f"{kind} {name} differs from the schema (its SQL was changed): "
                + (f"{what} may not be enforced" if kind == "trigger" else "its constraints may be gone")
            )
    for (kind, name), (tbl, _sql) in sorted(actual.items()):
        if kind == "trigger" and (kind, name) not in expected and tbl in own:
            problems.append(f"unexpected trigger {name} on table {tbl}: it is not part of the schema")
    return {name for (kind, name) in actual if kind == "table"}


def _check_protocols(conn: sqlite3.Connection, problems: list[str]) -> None:
    for p in conn.execute("SELECT * FROM protocols ORDER BY rowid"):
        body = p["body"] if isinstance(p["body"], str) else ""
        if hashlib.sha256(body.encode("utf-8")).hexdigest() != p["sha256"]:
            problems.append(f"protocols row {p['sha256'][:12]}...: its body does not hash to its sha256 (edited)")
            continue
        try:
            proto = parse_protocol(body.encode("utf-8"), source=f"protocols row {p['sha256'][:12]}...")
        except ProtocolError as e:
            problems.append(f"protocols row {p['sha256'][:12]}...: body is not a valid protocol ({e})")
            continue
        expected = {
            "version": proto.version,
            "n_seeds": proto.seeds.count,
            "min_pairs": proto.timing.min_pairs,
            "max_speedup": proto.breaker.max_speedup,
        }
        for col, value in expected.items():
            if p[col] != value:
                problems.append(
                    f"protocols row {p['sha256'][:12]}...: {col} = {p[col]!r} but its body says {value!r} (edited)"
                )


def _check_chain(conn: sqlite3.Connection, table: str, problems: list[str]) -> int:
    order = "rowid"
    rows = conn.execute(f"SELECT rowid AS _rowid_, * FROM {table} ORDER BY {order}").fetchall()
    expected_prev = ZERO_HASH
    prev_id: int | None = None
    for r in rows:
        rid = r["_rowid_"]
        label = _row_label(table, r)
        if r["prev_hash"] != expected_prev:
            first_missing = 1 if prev_id is None else prev_id + 1
            if rid > first_missing:
                gap = f"row {first_missing} is" if rid == first_missing + 1 else f"rows {first_missing}..{rid - 1} are"
                between = f"between {prev_id} and {rid}" if prev_id is not None else f"before {rid}"
                problems.append(f"{table} {gap} missing (chain broken {between})")
            else:
                after = f"row {prev_id}" if prev_id is not None else "the start of the chain"
                problems.append(
                    f"{label}: prev_hash is not the row_hash of {after} (chain broken: {after} was rewritten, "
                    "or rows were reordered or re-inserted)"
                )
        if row_hash(r["prev_hash"] or "", canonical_row(table, dict(r))) != r["row_hash"]:
            problems.append(f"{label} was edited (row_hash mismatch)")
        expected_prev = r["row_hash"]
        prev_id = rid
    state = conn.execute("SELECT head, count FROM chain_state WHERE tbl = ?", [table]).fetchone()
    if state is None:
        problems.append(f"chain_state has no row for {table}: the chain head cannot be checked")
    else:
        if state["count"] != len(rows):
            if state["count"] > len(rows):
                last = prev_id or 0
                missing = state["count"] - len(rows)
                problems.append(
                    f"{table}: chain_state records {state['count']} rows but the table has {len(rows)}: "
                    f"{missing} row(s) missing"
                    + (f" (row {last + 1} is missing: the table ends at row {last})" if last else "")
                )
            else:
                problems.append(
                    f"{table}: the table has {len(rows)} rows but chain_state records {state['count']} "
                    "(rows inserted while the triggers were bypassed)"
                )
        elif state["head"] != expected_prev:
            problems.append(
                f"{table}: the last row's row_hash is not the chain head recorded in chain_state (the end of the "
                "chain was rewritten)"
            )
    return len(rows)


def _check_runs_and_macs(conn: sqlite3.Connection, problems: list[str], notes: list[str]) -> int:
    nonces: dict[str, bytes | None] = {}
    unfinished = 0
    for run in conn.execute("SELECT rowid AS _rowid_, * FROM runs ORDER BY rowid"):
        run_id = run["run_id"]
        if run["nonce"] is None:
            nonces[run_id] = None
            unfinished += 1
            continue
        try:
            nonce = bytes.fromhex(run["nonce"])
        except (ValueError, TypeError):
            problems.append(f"run {run_id}: its revealed nonce is not hex")
            nonces[run_id] = None
            continue
        if nonce_commitment(nonce) != run["nonce_sha256"]:
            problems.append(
                f"run {run_id}: the revealed nonce does not match its commitment nonce_sha256 (edited run row)"
            )
            nonces[run_id] = None
            continue
        nonces[run_id] = nonce
    unchecked: dict[str, int] = {}
    for table in mac_tables():
        for r in conn.execute(f"SELECT * FROM {table} ORDER BY id"):
            run_id = r["run_id"]
            if run_id not in nonces:
                problems.append(f"{table} row {r['id']} names run {run_id!r}, which is not in runs")
                continue
            run_nonce = nonces[run_id]
            if run_nonce is None:
                unchecked[run_id] = unchecked.get(run_id, 0) + 1
                continue
            if row_mac(run_nonce, canonical_row(table, dict(r))) != r["row_mac"]:
                problems.append(
                    f"{table} row {r['id']} has a bad row_mac: not written by the controller of run {run_id} "
                    "(forged) or edited afterwards"
                )
    for run in conn.execute("SELECT run_id, started_at FROM runs WHERE nonce IS NULL ORDER BY rowid"):
        n = unchecked.get(run["run_id"], 0)
        notes.append(
            f"run {run['run_id']} (started {run['started_at']}) is unfinished: no nonce revealed (still running, "
            f"or its writer was killed); the MACs of its {n} row(s) cannot be checked, their chain was"
        )
    return unfinished


def verify_connection(conn: sqlite3.Connection, label: str = "") -> VerifyReport:
    conn.row_factory = sqlite3.Row
    problems: list[str] = []
    notes: list[str] = []
    counts: dict[str, int] = {}

    check = [r[0] for r in conn.execute("PRAGMA integrity_check").fetchall()]
    if check != ["ok"]:
        problems.append(f"PRAGMA integrity_check: {'; '.join(str(c) for c in check[:5])}")
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version != SCHEMA_VERSION:
        problems.append(f"user_version is {version}, expected schema {SCHEMA_VERSION}")
    tables = _check_schema(conn, problems)
    missing = [t for t in own_tables() if t not in tables]
    if missing:
        problems.append(f"cannot check further: table(s) {', '.join(missing)} missing")
        return VerifyReport(ok=False, problems=problems, notes=notes, counts=counts)

    _check_protocols(conn, problems)
    counts["protocols"] = conn.execute("SELECT count(*) FROM protocols").fetchone()[0]
    for table in chained_tables():
        counts[table] = _check_chain(conn, table, problems)
    counts["runs_unfinished"] = _check_runs_and_macs(conn, problems, notes)

    problems.extend(replay_problems(conn, label))
    return VerifyReport(ok=not problems, problems=problems, notes=notes, counts=counts)
