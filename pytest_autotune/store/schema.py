"""The store's schema in one namespace, for tests and tools (docs/reference/store.md).

Nothing in the store imports this module: the schema is made by the migrations (:mod:`.migrations`, one module per
migration, built with :mod:`.sqlbuild`, :mod:`.chain_rules` and :mod:`.rules`), read back from the migrated
template (:mod:`.template`), and hashed by the policy in :mod:`.columns`. Importing this module builds the template.
"""

from __future__ import annotations

from .chain_rules import ZERO_HASH
from .columns import (
    REMEASURE_RESULTS_PREFIX,
    RETEST_REPORT_PREFIX,
    RETEST_RESULTS_PREFIX,
    TRANSFER_RATIO_RTOL,
    added_columns,
    chained_tables,
    column_types,
    columns,
    hash_excluded,
    hash_omit_null,
    mac_tables,
    own_tables,
)
from .migrations import APPLICATION_ID, CHECK_EXPLANATIONS, EPOCH_RULES, SCHEMA_VERSION, migrations
from .migrations.m0001_initial import TABLES as TABLES_0001
from .migrations.m0005_study import REGISTRATION_STATUSES
from .template import template_schema

_schema = template_schema()

#: own table -> [(column, declared type, nullable)], after every migration
COLUMNS = {t: columns(t) for t in own_tables()}
COLUMN_TYPES = {t: column_types(t) for t in own_tables()}
#: columns a later migration added (ALTER TABLE ... ADD COLUMN), per table, in the order they were added
ADDED_COLUMNS = {t: added_columns(t) for t in own_tables() if added_columns(t)}
HASH_OMIT_NULL = {t: hash_omit_null(t) for t in own_tables()}
HASH_EXCLUDED = {t: hash_excluded(t) for t in own_tables()}
CHAINED_TABLES = chained_tables()
MAC_TABLES = mac_tables()
OWN_TABLES = own_tables()
#: every table and trigger after the last migration (name, exact SQL as sqlite_master stores it)
TABLES: list[tuple[str, str]] = list(_schema.tables.items())
TRIGGERS: list[tuple[str, str]] = [(n, sql) for n, (_, sql) in _schema.triggers.items()]
#: (type, name) -> exact SQL stored in sqlite_master once every migration is applied
EXPECTED_SCHEMA = _schema.expected
CHECK_NAMES = _schema.check_names
TRIGGER_RULES = _schema.trigger_rules

__all__ = [
    "ADDED_COLUMNS", "APPLICATION_ID", "CHAINED_TABLES", "CHECK_EXPLANATIONS", "CHECK_NAMES", "COLUMNS",
    "COLUMN_TYPES", "EPOCH_RULES", "EXPECTED_SCHEMA", "HASH_EXCLUDED", "HASH_OMIT_NULL", "MAC_TABLES", "OWN_TABLES",
    "REGISTRATION_STATUSES", "REMEASURE_RESULTS_PREFIX", "RETEST_REPORT_PREFIX", "RETEST_RESULTS_PREFIX",
    "SCHEMA_VERSION", "TABLES", "TABLES_0001", "TRANSFER_RATIO_RTOL", "TRIGGERS", "TRIGGER_RULES", "ZERO_HASH",
    "migrations",
]
