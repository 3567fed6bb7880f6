"""SQL text builders for the validator (docs/reference/store.md#rules): named CHECK constraints, ``RAISE(ABORT, ...)``
triggers and the predicates they share.

Every migration builds its SQL with these functions, so their output is part of what a migration executes: a change
here changes the SQL of every migration that uses it, and a store created before the change would then differ from
the template (``verify`` reports that). Change them only by adding new functions.
"""

from __future__ import annotations

#: the largest finite REAL (finite checks compare against it: SQLite has no isfinite())
MAX_REAL = "1.7976931348623157e308"

#: a column as ``(name, declared STRICT type, nullable)``
Column = tuple[str, str, bool]


def hex64(col: str) -> str:
    return f"(length({col}) = 64 AND {col} NOT GLOB '*[^0-9a-f]*')"


def finite_positive(col: str) -> str:
    return f"({col} > 0 AND {col} <= {MAX_REAL})"


def timestamp(col: str) -> str:
    return f"({col} GLOB '[0-9][0-9][0-9][0-9]-[0-1][0-9]-[0-3][0-9]T[0-2][0-9]:[0-5][0-9]:[0-6][0-9]*')"


def json_is(col: str, json_type: str) -> str:
    # json_type() raises on malformed JSON, so it only runs once json_valid() said yes (CASE is lazy)
    return f"CASE WHEN json_valid({col}) THEN json_type({col}) = '{json_type}' ELSE 0 END"


def check(name: str, expr: str) -> str:
    """A named table CHECK, one line of a CREATE TABLE."""
    # coalesce(..., 0): a CHECK whose expression is NULL passes in SQLite; ours must not
    return f"  CONSTRAINT {name} CHECK (coalesce({expr}, 0))"


def column_check(name: str, expr: str) -> str:
    """A named column CHECK, as ``ALTER TABLE ... ADD COLUMN`` receives it."""
    return f"CONSTRAINT {name} CHECK (coalesce({expr}, 0))"


def column_defs(columns: list[Column]) -> list[str]:
    out = []
    for name, ty, nullable in columns:
        if name == "id":
            out.append("  id INTEGER PRIMARY KEY AUTOINCREMENT")
        else:
            out.append(f"  {name} {ty}{'' if nullable else ' NOT NULL'}")
    return out


def create_table(table: str, columns: list[Column], extra: list[str], *, primary_key: str | None = None) -> str:
    lines = column_defs(columns)
    if primary_key:
        lines.append(f"  PRIMARY KEY ({primary_key})")
    lines.extend(extra)
    return f"CREATE TABLE {table} (\n" + ",\n".join(lines) + "\n) STRICT"


def trigger(name: str, timing: str, table: str, when: str | None, rule: str, message: str) -> str:
    """A trigger that refuses with ``<rule>: <message>`` (the rule name ValidatorRefusal reports)."""
    assert "'" not in message, message
    when_sql = f"\nWHEN {when}" if when else ""
    return (
        f"CREATE TRIGGER {name} {timing} ON {table}{when_sql}\n"
        f"BEGIN\n  SELECT RAISE(ABORT, '{rule}: {message}');\nEND"
    )


def run_exists() -> str:
    return "EXISTS (SELECT 1 FROM runs WHERE run_id = NEW.run_id)"


def run_finished() -> str:
    return "EXISTS (SELECT 1 FROM runs WHERE run_id = NEW.run_id AND finished_at IS NOT NULL)"


def protocol_param(param: str) -> str:
    return (
        f"(SELECT p.{param} FROM runs AS r JOIN protocols AS p ON p.sha256 = r.protocol_sha256 "
        f"WHERE r.run_id = NEW.run_id)"
    )


def run_field(field: str) -> str:
    return f"(SELECT {field} FROM runs WHERE run_id = NEW.run_id)"


#: the paired_seeds predicate: ``seeds`` is a JSON array of at least the protocol's n_seeds distinct non-negative
#: 64-bit integers (json1 reports an overflowing literal as type 'integer' with a REAL value, hence typeof)
SEEDS_VALID = (
    "coalesce(CASE WHEN json_valid(NEW.seeds) THEN ("
    "CASE WHEN json_type(NEW.seeds) = 'array' THEN ("
    f"json_array_length(NEW.seeds) >= {protocol_param('n_seeds')} "
    "AND NOT EXISTS (SELECT 1 FROM json_each(NEW.seeds) "
    "WHERE type <> 'integer' OR typeof(value) <> 'integer' OR value < 0) "
    "AND (SELECT count(DISTINCT value) FROM json_each(NEW.seeds)) = json_array_length(NEW.seeds)"
    ") ELSE 0 END) ELSE 0 END, 0)"
)
