"""The results store: SQLite with its validator inside the database (see docs/schema.md).

Only the controller process writes, through :class:`ResultStore`; xdist workers check their rows first with
:func:`dry_run_insert`. ``autotune verify`` / ``merge`` / ``show`` / ``quarantine`` are built on this package.
"""

from __future__ import annotations

from .db import ResultStore, dry_run_insert, refusal_from, rule_of, utc_now
from .hashing import canonical_row, nonce_commitment, row_hash, row_mac
from .merge import MergeReport, merge_databases
from .schema import SCHEMA_VERSION
from .verify import VerifyReport

__all__ = [
    "SCHEMA_VERSION",
    "MergeReport",
    "ResultStore",
    "VerifyReport",
    "canonical_row",
    "dry_run_insert",
    "merge_databases",
    "nonce_commitment",
    "refusal_from",
    "row_hash",
    "row_mac",
    "rule_of",
    "utc_now",
]
