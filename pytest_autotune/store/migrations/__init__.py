"""The store's migrations, in order (docs/schema.md, "Migrations").

A new database runs them all; an older one the ones it lacks, in place (sqlite-utils' ``Migrations``, set
``pytest_autotune.store``, table ``_sqlite_migrations``). Migration N sets ``PRAGMA user_version = N`` as its last
statement, so :data:`SCHEMA_VERSION` is the number of migrations.

A migration is one module here, listed in :data:`MIGRATIONS`, with:

* ``NAME``: ``"NNNN_what"`` (recorded in ``_sqlite_migrations``; never renamed);
* ``apply(db)``: its SQL, executed in one transaction. Frozen once released: a store created before keeps the SQL
  it ran, and ``verify`` compares every store with the template that runs these same statements
  (:mod:`..template`), so editing an old migration makes every existing store fail ``verify``;
* ``CHECK_EXPLANATIONS``: what each CHECK constraint it introduces requires (ValidatorRefusal's message);
* ``EPOCH_RULES``: the triggers it adds to tables that already had rows; it writes ``rule_epochs`` rows for them
  (:func:`..chain_rules.record_epochs`), and verify's replay judges older rows without them.

Columns, chained tables and MAC tables are read from the migrated template (:mod:`..columns`), so a migration that
adds a column or a chain needs no other change to the store.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from sqlite_utils.migrations import Migrations

from ..chain_rules import Named
from . import m0001_initial, m0002_retest, m0003_provenance, m0004_engine, m0005_study

#: every migration, in the order they apply
MIGRATIONS: tuple[ModuleType, ...] = (m0001_initial, m0002_retest, m0003_provenance, m0004_engine, m0005_study)

#: ``PRAGMA user_version`` once every migration has been applied
SCHEMA_VERSION = len(MIGRATIONS)

#: ``PRAGMA application_id`` of a pytest-autotune store ("PATS"), set by the first migration
APPLICATION_ID: int = m0001_initial.APPLICATION_ID

#: the sqlite-utils migration set every store is migrated with
migrations = Migrations("pytest_autotune.store")


def _register(version: int, module: ModuleType) -> None:
    def run(db: Any) -> None:
        module.apply(db)
        db.execute(f"PRAGMA user_version = {version}")

    run.__name__ = f"m{module.NAME}"
    migrations(name=module.NAME)(run)


for _version, _module in enumerate(MIGRATIONS, start=1):
    _register(_version, _module)

#: what each named CHECK constraint requires (the explanation ValidatorRefusal adds to SQLite's bare message)
CHECK_EXPLANATIONS: dict[str, str] = {k: v for m in MIGRATIONS for k, v in m.CHECK_EXPLANATIONS.items()}

#: migration name -> the rules it added to existing tables (judged from its rule_epochs.first_id on)
EPOCH_RULES: dict[str, list[Named]] = {m.NAME: list(m.EPOCH_RULES) for m in MIGRATIONS if m.EPOCH_RULES}

__all__ = ["APPLICATION_ID", "CHECK_EXPLANATIONS", "EPOCH_RULES", "MIGRATIONS", "SCHEMA_VERSION", "migrations"]
