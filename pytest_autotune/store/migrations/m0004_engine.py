"""Migration 0004_engine (schema 4): engine rows (docs/guide/engines.md). A ratio is only ever between two launches of
the SAME engine, driven by the SAME paired seeds. The arms are described in the row's provenance
(``arms.baseline``, ``arms.candidate``: engine name and the seeds that decided its prompts); the row's problem is
``<engine>:<workload>``. Kernel rows are not concerned."""

from __future__ import annotations

from typing import Any

from ..chain_rules import Named, record_epochs
from ..sqlbuild import SEEDS_VALID, trigger

NAME = "0004_engine"

CHECK_EXPLANATIONS: dict[str, str] = {}


def _engine_triggers() -> list[Named]:
    out = []
    for table in ("results", "quarantine"):
        engine = "json_extract(NEW.provenance, '$.arms.baseline.engine')"
        same_engine = (
            f"json_type(NEW.provenance, '$.arms.baseline.engine') = 'text' AND length({engine}) > 0 "
            f"AND json_type(NEW.provenance, '$.arms.candidate.engine') = 'text' "
            f"AND json_extract(NEW.provenance, '$.arms.candidate.engine') = {engine} "
            f"AND substr(NEW.problem, 1, length({engine}) + 1) = {engine} || ':'"
        )
        paired = (
            "json_type(NEW.provenance, '$.arms.baseline.seeds') = 'array' "
            "AND json_type(NEW.provenance, '$.arms.candidate.seeds') = 'array' "
            "AND json(json_extract(NEW.provenance, '$.arms.baseline.seeds')) = json(NEW.seeds) "
            "AND json(json_extract(NEW.provenance, '$.arms.candidate.seeds')) = json(NEW.seeds) "
            "AND json_array_length(NEW.seeds) > 0"
        )
        # judged only for an engine row whose JSON is valid and whose seeds pass paired_seeds (a malformed
        # provenance, or missing, too few or repeated seeds, are provenance_json's and paired_seeds' to name)
        valid_json = ("NEW.kind = 'engine' AND json_valid(NEW.provenance) AND json_type(NEW.provenance) = 'object' "
                      f"AND {SEEDS_VALID}")
        name = f"{table}_engine_arms"
        out.append((name, trigger(
            name, "BEFORE INSERT", table, f"{valid_json} AND NOT coalesce(({same_engine}), 0)", "engine_arms",
            "an engine row compares two launches of one engine: provenance arms.baseline.engine and "
            "arms.candidate.engine must name the same engine, and problem must read <engine>:<workload>",
        )))
        name = f"{table}_engine_paired_seeds"
        out.append((name, trigger(
            name, "BEFORE INSERT", table, f"{valid_json} AND NOT coalesce(({paired}), 0)", "engine_paired_seeds",
            "an engine row needs paired seeds: provenance arms.baseline.seeds and arms.candidate.seeds must both be "
            "the row seeds (the same seeds decided the prompts of both arms)",
        )))
    return out


#: every rule of this migration applies to rows from its rule_epochs.first_id on
TRIGGERS: list[Named] = _engine_triggers()
EPOCH_RULES: list[Named] = TRIGGERS


def apply(db: Any) -> None:
    record_epochs(db, NAME, ("results", "quarantine"))
    # last-rule-first, as in 0001: a row without arms is told about engine_arms before engine_paired_seeds
    for _, sql in reversed(TRIGGERS):
        db.execute(sql)
