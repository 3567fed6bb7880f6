"""How an item's answers are judged, set up once per item before any gate runs: the contract its candidate answers
for (problems/contract.py) and the float64 oracle its floating outputs are measured against (oracle.py,
gates/accuracy.py). ``flow.py`` calls :func:`prepare_judging`; the gates read ``ctx.contract`` and ``ctx.oracle``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .oracle import Oracle
from .problems.contract import contract_for

if TYPE_CHECKING:  # pragma: no cover
    from .item_run import FlowEnv, ItemRun


def prepare_judging(env: "FlowEnv", item: "ItemRun") -> None:
    """Set the item's contract and oracle. Raises ProblemLoadError for a contract the problem declares wrongly."""
    ctx, proto = item.ctx, env.protocol
    beyond = "refuse" if env.strict_contract else proto.contract.beyond
    ctx.contract = contract_for(item.problem, proto.contract.undeclared_layouts, beyond)
    ctx.evidence.contract = ctx.contract.as_json()
    if proto.accuracy.rule == "float64-oracle":
        oracle = Oracle(item.golden)
        item.golden.dependents.append(oracle.clear)
        ctx.oracle = oracle
    ctx.evidence.accuracy = {"rule": proto.accuracy.rule}


__all__ = ["prepare_judging"]
