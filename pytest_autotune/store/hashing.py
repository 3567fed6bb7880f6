"""Canonical rows, the hash chain and row MACs.

* canonical row: :func:`pytest_autotune.result.canonical_json` of every column of the row except ``id``,
  ``prev_hash``, ``row_hash`` and ``row_mac`` (for ``runs`` also ``finished_at`` and ``nonce``, which are written
  at finish), each value normalised by the column's declared type (REAL -> float, INTEGER -> int, TEXT -> str,
  NULL -> None), so that the row ``verify`` reads back from SQLite hashes exactly like the row the writer hashed.
  Columns added by a later migration (:func:`.columns.hash_omit_null`: ``results.retest_of``, ``transfer_ratio``,
  ...) are left out while NULL, so rows written before the migration keep their hashes and MACs.
* ``row_hash = sha256(prev_hash_hex + canonical_row)`` (hex), ``prev_hash`` is the previous row's ``row_hash`` in
  the same table (64 zeros for the first row).
* ``row_mac = HMAC-SHA256(nonce, canonical_row)`` (hex), keyed with the run's secret 32-byte nonce, which is
  revealed only when the run finishes (``nonce_sha256 = sha256(nonce)`` is committed when it begins).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
from collections.abc import Mapping
from typing import Any

from ..result import canonical_json
from ..seeds import nonce_commitment  # the one definition (re-exported: store users import it from here)
from .columns import ZERO_HASH, column_types, hash_excluded, hash_omit_null

__all__ = [
    "ZERO_HASH",
    "canonical_row",
    "nonce_commitment",
    "normalise",
    "row_hash",
    "row_mac",
]


def normalise(value: Any, declared_type: str) -> Any:
    """A value as SQLite's STRICT column of ``declared_type`` stores it (best effort for values it refuses)."""
    if value is None:
        return None
    try:
        if declared_type == "REAL":
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return float(value)
            if isinstance(value, bool):
                return float(value)
            if isinstance(value, str):
                return float(value)
        elif declared_type == "INTEGER":
            if isinstance(value, bool):
                return int(value)
            if isinstance(value, int):
                return value
            if isinstance(value, float) and value.is_integer():
                return int(value)
            if isinstance(value, str):
                return int(value)
        elif declared_type == "TEXT":
            if isinstance(value, str):
                return value
            if isinstance(value, int) and not isinstance(value, bool):
                return str(value)
    except (ValueError, OverflowError):
        pass
    # something the column will refuse anyway (the insert fails): keep it hashable
    return value if isinstance(value, (str, int, float)) else repr(value)


def _dumps(values: dict[str, Any]) -> str:
    try:
        return canonical_json(values)
    except ValueError:
        # NaN/inf never get past the validator (NaN is stored as NULL, inf fails the finite checks);
        # hash something so that the database, not this function, is the one that refuses the row
        return json.dumps(
            {k: (repr(v) if isinstance(v, float) and not math.isfinite(v) else v) for k, v in values.items()},
            sort_keys=True,
            separators=(",", ":"),
        )


def canonical_row(table: str, row: Mapping[str, Any]) -> str:
    """The canonical JSON of ``row`` (a row of ``table``), as hashed and MACed."""
    types = column_types(table)
    excluded = hash_excluded(table)
    omit_null = hash_omit_null(table)
    values = {}
    for col, ty in types.items():
        if col in excluded:
            continue
        value = normalise(row.get(col), ty)
        if value is None and col in omit_null:
            continue
        values[col] = value
    return _dumps(values)


def row_hash(prev_hash: str, canonical: str) -> str:
    return hashlib.sha256((prev_hash + canonical).encode("utf-8")).hexdigest()


def row_mac(nonce: bytes, canonical: str) -> str:
    return hmac.new(nonce, canonical.encode("utf-8"), hashlib.sha256).hexdigest()


