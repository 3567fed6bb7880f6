"""``dry_run_insert``: would the store take this row? (docs/reference/store.md#files-transactions-crash-safety).

pytest-xdist workers never write the store: they validate each row here, against the very same schema and
triggers in a private :memory: copy of the template holding only the run and its protocol, and hand it to the
controller, which inserts it.
"""

from __future__ import annotations

import re
from typing import Any

from ..errors import ValidatorRefusal
from ..protocol import Protocol
from ..result import RunRecord
from .columns import mac_tables
from .writer import StoreWriter

__all__ = ["dry_run_insert"]


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
    store = StoreWriter.in_memory()
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
        store.insert_row(table, row, nonce=nonce if table in mac_tables() else None)
    finally:
        store.close()


def _next_id(store: StoreWriter, table: str, next_id: int) -> None:
    """The next AUTOINCREMENT id of ``table`` in the private store will be ``next_id``."""
    with store.transaction() as conn:
        conn.execute("DELETE FROM sqlite_sequence WHERE name = ?", [table])
        conn.execute("INSERT INTO sqlite_sequence (name, seq) VALUES (?, ?)", [table, next_id - 1])


def _stand_in_origin(store: StoreWriter, row: dict[str, Any], origin_id: int, nonce: bytes) -> None:
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
    _next_id(store, "results", origin_id)
    try:
        store.insert_row("results", origin, nonce=nonce)
    except ValidatorRefusal:
        return  # e.g. an origin above the breaker (released there): the real store decides


def _stand_in_release(store: StoreWriter, row: dict[str, Any], release_id: int, nonce: bytes) -> None:
    q = dict(row, nodeid=f"{row.get('nodeid')}#dry-run-quarantine", breaker="tripped",
             reason="dry run: stands in for the quarantine row the release names")
    try:
        qid = store.insert_row("quarantine", q, nonce=nonce)
    except ValidatorRefusal:
        return  # the row itself is invalid: the real insert below reports the rule
    _next_id(store, "quarantine_releases", release_id)
    store.release_quarantine(qid, "dry run: stands in for the release named by breaker", "dry-run")


def _stand_in_registration(store: StoreWriter, run_id: str, study: str, nonce: bytes) -> None:
    try:
        store.insert_row("study_registrations", {
            "run_id": run_id, "study": study, "status": "unregistered", "registry": "dry-run",
            "detail": "dry run: stands in for the registration the controller records"}, nonce=nonce)
    except ValidatorRefusal:
        return  # an invalid study name: the real insert below reports the rule
