"""Migration 0002_retest (schema 2): the held-out retest link (docs/guide/heldout.md): ``results.retest_of`` and
``results.transfer_ratio`` with their CHECKs, added by ``ALTER TABLE ... ADD COLUMN`` (existing rows read NULL
there, which every new rule accepts, and keep their hashes: NULL added columns are left out of the canonical row),
and the trigger ``results_retest_link``."""

from __future__ import annotations

from typing import Any

from ..chain_rules import Named
from ..sqlbuild import column_check, finite_positive, trigger

NAME = "0002_retest"

#: relative tolerance of ``transfer_ratio = speedup / origin speedup`` (rule retest_link)
TRANSFER_RATIO_RTOL = 1e-9

#: (column, column definition as ``ALTER TABLE results ADD COLUMN`` receives it), in order
RESULTS_COLUMN_DEFS: list[tuple[str, str]] = [
    ("retest_of", "retest_of TEXT " + column_check(
        "retest_ref",
        "retest_of IS NULL "
        "OR (retest_of GLOB 'results:[1-9]*' AND substr(retest_of, 9) NOT GLOB '*[^0-9]*' "
        "AND length(retest_of) <= 26) "
        "OR (retest_of GLOB 'report:*' AND length(trim(substr(retest_of, 8))) > 0)")),
    ("transfer_ratio", "transfer_ratio REAL "
     + column_check("retest_pair", "(retest_of IS NULL) = (transfer_ratio IS NULL)") + " "
     + column_check("transfer_ratio_positive", f"transfer_ratio IS NULL OR {finite_positive('transfer_ratio')}")),
]

CHECK_EXPLANATIONS = {
    "retest_ref": "retest_of must be NULL, results:<id> (a results row id) or report:<non-empty reference>",
    "retest_pair": "retest_of and transfer_ratio are both NULL or both set",
    "transfer_ratio_positive": "transfer_ratio must be NULL or finite and > 0",
}

#: the retest rule only ever applies to rows that have a link, which no older row has
EPOCH_RULES: list[Named] = []


def _retest_link_trigger() -> Named:
    # the id is read with CAST (primary-key lookup) and the text compared back, so 'results:07' or 'results:7x'
    # name no row
    valid = (
        "(SELECT o.problem = NEW.problem AND o.candidate = NEW.candidate AND o.device <> NEW.device "
        "AND o.speedup > 0 AND abs(NEW.transfer_ratio - NEW.speedup / o.speedup) "
        f"<= {TRANSFER_RATIO_RTOL!r} * abs(NEW.speedup / o.speedup) "
        "FROM results AS o WHERE o.id = CAST(substr(NEW.retest_of, 9) AS INTEGER) "
        "AND 'results:' || o.id = NEW.retest_of)"
    )
    return ("results_retest_link", trigger(
        "results_retest_link", "BEFORE INSERT", "results",
        f"NEW.retest_of GLOB 'results:*' AND NEW.transfer_ratio IS NOT NULL AND NOT coalesce({valid}, 0)",
        "retest_link",
        "retest_of = results:ID must name an existing results row of the same problem and candidate on a "
        "different device, and transfer_ratio must be speedup / that row speedup (relative tolerance 1e-9)"))


TRIGGERS: list[Named] = [_retest_link_trigger()]


def apply(db: Any) -> None:
    for _, definition in RESULTS_COLUMN_DEFS:
        db.execute(f"ALTER TABLE results ADD COLUMN {definition}")
    for _, sql in TRIGGERS:
        db.execute(sql)
