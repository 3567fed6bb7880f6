"""verify's replay (docs/reference/store.md#verify, step 7): every row of a store inserted again, in order, into a
private :memory: copy of the template through the current validator. A row refused there got in while the
validator was bypassed (e.g. triggers dropped and recreated around a forged insert with a correct hash and MAC).

A rule a later migration added to an existing table judges only the rows appended after it (``rule_epochs``): an
older row is replayed without it, as it was judged when it got in.
"""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path
from typing import Any, Iterator

from .copier import Copier, Sink
from .migrations import EPOCH_RULES
from .template import memory_connection
from .writer import StoreReader, StoreWriter

__all__ = ["replay_problems"]

#: (trigger, its SQL, the first row id it judges)
_Rule = tuple[str, str, int]


def _later_rules(conn: sqlite3.Connection) -> dict[str, list[_Rule]]:
    """table -> the rules that migrations after 0001 added to it, with the first row id each judges."""
    try:
        epochs = {(r[0], r[1]): int(r[2]) for r in conn.execute("SELECT migration, tbl, first_id FROM rule_epochs")}
    except sqlite3.Error:
        return {}
    out: dict[str, list[_Rule]] = {}
    for migration, triggers in EPOCH_RULES.items():
        for name, sql in triggers:
            table = sql.split(" ON ", 1)[1].split()[0]
            if (migration, table) in epochs:
                out.setdefault(table, []).append((name, sql, epochs[(migration, table)]))
    return out


class _ReplayCopier(Copier):
    def __init__(self, src: StoreReader, label: str, target_conn: sqlite3.Connection, sink: Sink,
                 later_rules: dict[str, list[_Rule]]) -> None:
        super().__init__(src, label, StoreWriter(target_conn, Path(":memory:"), readonly=False), sink,
                         check_macs=False)
        self._target_conn = target_conn
        self._later_rules = later_rules

    @contextlib.contextmanager
    def rules_of_its_time(self, table: str, row: dict[str, Any]) -> Iterator[None]:
        """A row that was in the table before a later migration added a rule (its id is below that migration's
        rule_epochs.first_id in the source) is judged without that rule. (A real merge target keeps every rule.)"""
        dropped = [(name, sql) for name, sql, first_id in self._later_rules.get(table, [])
                   if isinstance(row.get("id"), int) and row["id"] < first_id]
        for name, _ in dropped:
            self._target_conn.execute(f"DROP TRIGGER {name}")
        try:
            yield
        finally:
            for _, sql in dropped:
                self._target_conn.execute(sql)


def replay_problems(conn: sqlite3.Connection, label: str = "") -> list[str]:
    """Insert every row of ``conn`` again, in order, into a private :memory: store through the current validator.
    Returns one problem per row it refuses (such a row got in while the validator was bypassed)."""
    target = memory_connection()
    sink = Sink()
    try:
        _ReplayCopier(StoreReader(conn), label or "db", target, sink, _later_rules(conn)).run()
    finally:
        target.close()
    return [
        "replay: "
        + m.replace(" refused by the validator: ", " is refused by the validator when replayed: ", 1)
        + " (it got in while the validator was bypassed)"
        for m in sink.refusals
    ]
