"""The validator's refusals as :class:`ValidatorRefusal` (docs/reference/store.md#error-messages-and-rule-names)."""

from __future__ import annotations

import re
import sqlite3

from ..errors import ValidatorRefusal
from .migrations import CHECK_EXPLANATIONS

__all__ = ["refusal_from", "rule_of"]

_RULE_PREFIX = re.compile(r"^([a-z_][a-z0-9_]*): ")


def rule_of(message: str) -> str:
    """The rule name in an SQLite constraint message."""
    if message.startswith("CHECK constraint failed: "):
        return message[len("CHECK constraint failed: ") :].strip()
    if message.startswith("NOT NULL constraint failed"):
        return "not_null"
    if message.startswith(("UNIQUE constraint failed", "PRIMARY KEY")):
        return "unique"
    if message.startswith("cannot store ") and " column " in message:
        return "datatype"
    if message.startswith("FOREIGN KEY"):
        return "foreign_key"
    m = _RULE_PREFIX.match(message)
    if m:
        return m.group(1)
    return "integrity"


def refusal_from(err: sqlite3.IntegrityError, table: str | None = None) -> ValidatorRefusal:
    """Turn the database validator's IntegrityError into :class:`ValidatorRefusal` naming the rule."""
    message = str(err)
    rule = rule_of(message)
    if rule == "datatype" or rule == "not_null" or rule == "unique":
        message = f"{rule}: {message}"
    elif message.startswith("CHECK constraint failed"):
        where = f" on {table}" if table else ""
        why = CHECK_EXPLANATIONS.get(rule, "see docs/reference/store.md")
        message = f"{rule}: {why} (CHECK constraint {rule}{where})"
    return ValidatorRefusal(rule, message)
