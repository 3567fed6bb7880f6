"""The store's migrations, in order (docs/reference/store.md#migrations).

A new database runs them all; an older one the ones it lacks, in place (sqlite-utils' ``Migrations``, set
``pytest_autotune.store``, table ``_sqlite_migrations``). Migration N sets ``PRAGMA user_version = N`` as its last
statement, so :data:`SCHEMA_VERSION` is the number of migrations.

A migration is one module here, listed in :data:`MIGRATIONS`, with:

* ``NAME``: ``"NNNN_what"`` (recorded in ``_sqlite_migrations``; never renamed);
* ``apply(db)``: its SQL, executed in one transaction. Frozen once released: a store created before keeps the SQL
  it ran, and ``verify`` compares every store with the template that runs these same statements
  (:mod:`..template`), so editing an old migration would make every existing store fail ``verify``. The registry
  holds the sha256 of the statements each migration executes, and a migration whose statements differ refuses to
  run (:class:`FrozenMigrationError`, which names the digest to record for a new one);
* ``CHECK_EXPLANATIONS``: what each CHECK constraint it introduces requires (ValidatorRefusal's message);
* ``EPOCH_RULES``: the triggers it adds to tables that already had rows; it writes ``rule_epochs`` rows for them
  (:func:`..chain_rules.record_epochs`), and verify's replay judges older rows without them.

Columns, chained tables and MAC tables are read from the migrated template (:mod:`..columns`), so a migration that
adds a column or a chain needs no other change to the store.
"""

from __future__ import annotations

import hashlib
from types import ModuleType
from typing import Any

from sqlite_utils.migrations import Migrations

from ..chain_rules import Named
from . import m0001_initial, m0002_retest, m0003_provenance, m0004_engine, m0005_study, m0006_contract

#: every migration, in the order they apply, with the sha256 of the statements it executes
_REGISTRY: tuple[tuple[ModuleType, str], ...] = (
    (m0001_initial, "d1e8a190aa73006563491f3b399938eae93a7ca11618a2f0e2977d36b8a4c7b6"),
    (m0002_retest, "16e11ca70fce314e8c0c6d0d2da91d427937866931a214bd9dac137146178b28"),
    (m0003_provenance, "9bf26545f25859979776a40d2b0ef3bf107bc944abbfabe7bcd83799f5ec1437"),
    (m0004_engine, "db035d79317c7d72be9d026f1d2c38b44ee68a40daaf1f8b56da0ac6eb3061a4"),
    (m0005_study, "81ec1e82d6d7abf1fce4f11b61dd7d215a925c2c89e1b8758710ca0d98962655"),
    (m0006_contract, "2488c28f56f5cede98d08e122911aed91584a3223f0094d54f8e21676283988b"),
)
MIGRATIONS: tuple[ModuleType, ...] = tuple(m for m, _ in _REGISTRY)

#: ``PRAGMA user_version`` once every migration has been applied
SCHEMA_VERSION = len(MIGRATIONS)

#: ``PRAGMA application_id`` of a pytest-autotune store ("PATS"), set by the first migration
APPLICATION_ID: int = m0001_initial.APPLICATION_ID

#: the sqlite-utils migration set every store is migrated with
migrations = Migrations("pytest_autotune.store")


class FrozenMigrationError(RuntimeError):
    """A migration executed other statements than the ones the registry recorded for it."""


class _Recorder:
    """Forwards ``execute`` to the database and keeps a digest of every statement and its parameters."""

    def __init__(self, db: Any) -> None:
        self._db = db
        self._digest = hashlib.sha256()

    def execute(self, sql: str, parameters: Any = None) -> Any:
        self._digest.update(repr((sql, parameters)).encode("utf-8") + b"\n")
        return self._db.execute(sql) if parameters is None else self._db.execute(sql, parameters)

    def hexdigest(self) -> str:
        return self._digest.hexdigest()


def statements_sha256(module: ModuleType) -> str:
    """The sha256 of the statements ``module.apply`` executes (on a scratch database that has every earlier
    migration)."""
    import sqlite3

    import sqlite_utils

    conn = sqlite3.connect(":memory:", isolation_level=None)
    try:
        db = sqlite_utils.Database(conn, execute_plugins=False)
        for earlier in MIGRATIONS[: MIGRATIONS.index(module)]:
            earlier.apply(db)
        recorder = _Recorder(db)
        module.apply(recorder)
        return recorder.hexdigest()
    finally:
        conn.close()


def _register(version: int, module: ModuleType, frozen_sha256: str) -> None:
    def run(db: Any) -> None:
        recorder = _Recorder(db)
        module.apply(recorder)
        if recorder.hexdigest() != frozen_sha256:
            # raised inside the migration's transaction: nothing of it is committed
            raise FrozenMigrationError(
                f"migration {module.NAME} executed statements with sha256 {recorder.hexdigest()}, but the registry "
                f"(pytest_autotune/store/migrations/__init__.py) records {frozen_sha256}: a released migration is "
                "frozen (every store ran its exact SQL and verify compares stores with it); change the schema in a "
                "new migration, and record a new migration with the digest above"
            )
        db.execute(f"PRAGMA user_version = {version}")

    run.__name__ = f"m{module.NAME}"
    migrations(name=module.NAME)(run)


for _version, (_module, _sha256) in enumerate(_REGISTRY, start=1):
    _register(_version, _module, _sha256)

#: what each named CHECK constraint requires (the explanation ValidatorRefusal adds to SQLite's bare message)
CHECK_EXPLANATIONS: dict[str, str] = {k: v for m in MIGRATIONS for k, v in m.CHECK_EXPLANATIONS.items()}

#: migration name -> the rules it added to existing tables (judged from its rule_epochs.first_id on)
EPOCH_RULES: dict[str, list[Named]] = {m.NAME: list(m.EPOCH_RULES) for m in MIGRATIONS if m.EPOCH_RULES}

__all__ = ["APPLICATION_ID", "CHECK_EXPLANATIONS", "EPOCH_RULES", "FrozenMigrationError", "MIGRATIONS", "SCHEMA_VERSION",
           "migrations", "statements_sha256"]
