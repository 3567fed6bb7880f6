"""Migration 0003_provenance (schema 3): a measurement row must carry its item provenance (the very digests and
seeds of the row, and the sizes measured) in its JSON (rule ``provenance_complete``), and ``rule_epochs``: from
which row id on a table is judged by the rules a later migration added (older rows got in under the rules of their
time; verify's replay judges them so)."""

from __future__ import annotations

from typing import Any

from ..chain_rules import Named, record_epochs
from ..sqlbuild import hex64, trigger

NAME = "0003_provenance"

RULE_EPOCHS_SQL = (
    "CREATE TABLE rule_epochs (\n"
    "  migration TEXT NOT NULL,\n"
    "  tbl TEXT NOT NULL,\n"
    "  first_id INTEGER NOT NULL,\n"
    "  PRIMARY KEY (migration, tbl)\n"
    ") STRICT"
)

CHECK_EXPLANATIONS: dict[str, str] = {}


def _provenance_triggers() -> list[Named]:
    """Checked in the database, so a raw INSERT cannot skip it (the run's provenance is on its runs row)."""
    out = []
    for table in ("results", "quarantine"):
        complete = (
            "CASE WHEN json_valid(NEW.provenance) THEN (json_type(NEW.provenance) = 'object' "
            "AND json_extract(NEW.provenance, '$.problem_sha256') IS NEW.problem_sha256 "
            "AND json_extract(NEW.provenance, '$.candidate_sha256') IS NEW.candidate_sha256 "
            "AND json_extract(NEW.provenance, '$.baseline_sha256') IS NEW.baseline_sha256 "
            "AND json_type(NEW.provenance, '$.seeds') = 'array' "
            "AND json_type(NEW.provenance, '$.sizes') = 'object') ELSE 0 END"
        )
        # a malformed digest or provenance is left to its own CHECK (digests, provenance_json) to name
        own_ok = (" AND ".join(hex64(f"NEW.{c}") for c in ("problem_sha256", "candidate_sha256", "baseline_sha256"))
                  + " AND json_valid(NEW.provenance) AND json_type(NEW.provenance) = 'object'")
        name = f"{table}_provenance_complete"
        out.append((name, trigger(
            name, "BEFORE INSERT", table, f"{own_ok} AND NOT coalesce(({complete}), 0)", "provenance_complete",
            "provenance must be a JSON object naming this row problem_sha256, candidate_sha256 and "
            "baseline_sha256, with the seeds (array) and the sizes measured (object)",
        )))
    return out


def _epoch_triggers() -> list[Named]:
    out = []
    for event in ("UPDATE", "DELETE"):
        name = f"rule_epochs_append_only_{event.lower()}"
        out.append((name, trigger(name, f"BEFORE {event}", "rule_epochs", None, "rule_epochs_append_only",
                                  "rule_epochs rows are never changed or deleted")))
    return out


#: the rules this migration adds to existing tables: rows below its rule_epochs.first_id are replayed without them
EPOCH_RULES: list[Named] = _provenance_triggers()
TRIGGERS: list[Named] = EPOCH_RULES + _epoch_triggers()


def apply(db: Any) -> None:
    db.execute(RULE_EPOCHS_SQL)
    record_epochs(db, NAME, ("results", "quarantine"))
    for _, sql in TRIGGERS:
        db.execute(sql)
