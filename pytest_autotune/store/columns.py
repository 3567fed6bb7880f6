"""The store's columns and its hash policy (docs/reference/store.md#tables-and-columns, "Hash chains and MACs").

Columns and their declared STRICT types are read from the migrated template (:mod:`.template`), never listed twice:
a value is stored as exactly its column's type or refused, so what ``verify`` reads back hashes like what the
writer hashed. The policy on top:

* a table whose rows carry ``prev_hash``/``row_hash`` is chained; one that carries ``row_mac`` is MACed with the
  run's nonce;
* the canonical row leaves out ``id``, ``prev_hash``, ``row_hash``, ``row_mac`` (for ``runs`` also ``finished_at``
  and ``nonce``, written at finish: the nonce is checked through its commitment instead);
* a column added by a later migration is left out of the canonical row while NULL, so a row written before the
  migration hashes, and MACs, exactly as it did when it was written; a set value is always part of it.
"""

from __future__ import annotations

from functools import cache

from .chain_rules import ZERO_HASH
from .migrations.m0002_retest import TRANSFER_RATIO_RTOL
from .sqlbuild import Column
from .template import template_schema

__all__ = [
    "REMEASURE_RESULTS_PREFIX",
    "RETEST_REPORT_PREFIX",
    "RETEST_RESULTS_PREFIX",
    "TRANSFER_RATIO_RTOL",
    "ZERO_HASH",
    "added_columns",
    "chained_tables",
    "column_types",
    "columns",
    "hash_excluded",
    "hash_omit_null",
    "mac_tables",
    "own_tables",
]

#: the held-out retest link (docs/guide/heldout.md): "results:<id>" (a results row of this store) or
#: "report:<file>#<run_id>/<nodeid>" (an item of a committed JSON report)
RETEST_RESULTS_PREFIX = "results:"
RETEST_REPORT_PREFIX = "report:"
#: ``results.remeasure_of``: "results:<id>", the row a re-measurement re-times (``autotune remeasure``)
REMEASURE_RESULTS_PREFIX = "results:"

_NEVER_HASHED = frozenset({"id", "prev_hash", "row_hash", "row_mac"})
_WRITTEN_AT_FINISH = frozenset({"finished_at", "nonce"})


def own_tables() -> tuple[str, ...]:
    """Every table of the schema, in creation order (others in a store file are not the schema's)."""
    return tuple(template_schema().tables)


def columns(table: str) -> list[Column]:
    """``table``'s columns as (name, declared type, nullable), in table order."""
    return template_schema().columns[table]


@cache
def column_types(table: str) -> dict[str, str]:
    """column name -> declared type (used to normalise values before hashing)."""
    return {c: ty for c, ty, _ in columns(table)}


def added_columns(table: str) -> tuple[str, ...]:
    """The columns later migrations added to ``table``, in the order they were added."""
    return template_schema().added_columns.get(table, ())


@cache
def chained_tables() -> tuple[str, ...]:
    """Tables whose rows form a hash chain, in the order verify reports them (creation order)."""
    return tuple(t for t in own_tables() if {"prev_hash", "row_hash"} <= set(column_types(t)))


@cache
def mac_tables() -> tuple[str, ...]:
    """Tables whose rows carry ``row_mac = HMAC(run nonce, canonical row)``."""
    return tuple(t for t in own_tables() if "row_mac" in column_types(t))


@cache
def hash_excluded(table: str) -> frozenset[str]:
    """Columns never part of the canonical row."""
    return _NEVER_HASHED | (_WRITTEN_AT_FINISH if table == "runs" else frozenset())


@cache
def hash_omit_null(table: str) -> frozenset[str]:
    """Columns left out of the canonical row when NULL: those added by later migrations."""
    return frozenset(added_columns(table))
