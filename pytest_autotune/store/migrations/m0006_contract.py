"""Migration 0006_contract (schema 6): how an item's answers were judged (docs/guide/contract.md):
``results.contract``, ``quarantine.contract`` and ``rejections.contract``, a JSON object with the contract the
candidate answered for (its layouts, shapes, value domain and what a wrong answer beyond it does), the findings of
probes beyond it, the accuracy rule and its numbers, KernelBench's own verdict, and for a refusal the clause it
broke. Added by ``ALTER TABLE ... ADD COLUMN``: older rows read NULL there and keep their hashes.

Rule ``strict_without_findings``: a result judged under a strict contract (``$.beyond = 'refuse'``) carries no
finding -- under a strict contract a wrong answer beyond it is a refusal, never a recorded speedup."""

from __future__ import annotations

from typing import Any

from ..chain_rules import Named
from ..sqlbuild import column_check, trigger

NAME = "0006_contract"

TABLES = ("results", "quarantine", "rejections")


def _contract_json() -> str:
    return "contract IS NULL OR (json_valid(contract) AND json_type(contract) = 'object')"


COLUMN_DEF = "contract TEXT " + column_check("contract_json", _contract_json())

CHECK_EXPLANATIONS = {
    "contract_json": "contract must be NULL or a JSON object (the contract, findings, accuracy and KernelBench's "
                     "verdict of the item)",
}

#: the rule only applies to rows that carry a contract, which no older row does
EPOCH_RULES: list[Named] = []


def _strict_trigger(table: str) -> Named:
    name = f"{table}_strict_without_findings"
    return (name, trigger(
        name, "BEFORE INSERT", table,
        "NEW.contract IS NOT NULL AND json_valid(NEW.contract) "
        "AND json_extract(NEW.contract, '$.beyond') = 'refuse' "
        "AND coalesce(json_array_length(NEW.contract, '$.findings'), 0) > 0",
        "strict_without_findings",
        "a measurement judged under a strict contract carries no finding: a wrong answer beyond the contract is "
        "then a refusal, never a recorded speedup"))


TRIGGERS: list[Named] = [_strict_trigger("results"), _strict_trigger("quarantine")]


def apply(db: Any) -> None:
    for table in TABLES:
        db.execute(f"ALTER TABLE {table} ADD COLUMN {COLUMN_DEF}")
    for _, sql in TRIGGERS:
        db.execute(sql)
