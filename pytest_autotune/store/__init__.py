"""The results store: SQLite with its validator inside the database (see docs/reference/store.md).

Only the controller process writes, through :class:`ResultStore`; xdist workers check their rows first with
:func:`dry_run_insert`. ``autotune verify`` / ``merge`` / ``show`` / ``quarantine`` are built on this package.
"""

from __future__ import annotations

from .db import ResultStore
from .dry_run import dry_run_insert
from .hashing import canonical_row, nonce_commitment, row_hash, row_mac
from .merge import MergeReport, merge_databases
from .migrations import SCHEMA_VERSION
from .refusals import refusal_from, rule_of
from .verify import VerifyReport
from .writer import utc_now

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
