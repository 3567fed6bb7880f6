"""How an item's timing rounds get their input sets: derived from one draw a round, or drawn one by one
(problems/derived.py; ``[devices.cpu].input_sets``).

Derived sets are only as good as the difference between them: a timed call must not be answerable with an
earlier call's output. Before an item is timed the controller runs the reference on three derived sets of one
draw and asks, of each set after the first, the question the timed-outputs gate will ask of every verified
round: would the previous set's output, fingerprinted at random positions, pass for this set's golden output
(gates/compare.py ``check_fingerprint``)? If it would for any of them (an op that ignores positive scaling, such
as ``sign`` or ``x > 0``), a replayed answer could pass, and the item's sets are drawn one by one instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import torch

from ..gates.compare import as_list, check_fingerprint
from ..golden import Golden
from ..protocol import Protocol
from ..sandbox.outputs import fingerprints

#: derived sets compared (each with the one before it)
SETS_CHECKED = 3
#: positions of a fingerprint, as the timing rounds draw them (sandbox/child_timing.py)
POSITIONS = 64


@dataclass(frozen=True)
class InputSetsChoice:
    spread: Optional[float]  # the derivation's spread, None: drawn
    why: str

    def details(self) -> dict[str, Any]:
        return {"mode": "derived" if self.spread else "drawn", "spread": self.spread, "why": self.why}


def choose_input_sets(golden: Golden, proto: Protocol, spread: Optional[float], seed: int,
                      positions_seed: int, floor: float = 0.0) -> InputSetsChoice:
    """``floor``: the timed-outputs check's least atol for this item (gates/correctness.py timed_outputs_floor):
    a replay is judged by the check as it will run."""
    if not spread:
        return InputSetsChoice(None, "the protocol draws every set")
    outs = list(golden.iter_stream({"seed": seed, "count": SETS_CHECKED, "derive": spread}))
    gen = torch.Generator().manual_seed(positions_seed)
    for j in range(1, len(outs)):
        if _replay_passes(outs[j - 1], outs[j], proto, gen, floor):
            return InputSetsChoice(None, f"the reference's output on derived set {j - 1} passes the timed-output "
                                         f"check for set {j} (the op ignores the derivation's scaling): sets drawn")
    return InputSetsChoice(spread, f"a replayed output fails the timed-output check on {SETS_CHECKED - 1} of "
                                   f"{SETS_CHECKED - 1} derived sets")


def _replay_passes(previous: Any, current: Any, proto: Protocol, gen: torch.Generator, floor: float = 0.0) -> bool:
    """Would ``previous``, returned again, pass the timed-outputs gate's check against ``current``?"""
    prints = fingerprints([previous], gen, POSITIONS)[0]
    golden = as_list(current)
    if len(prints) != len(golden):
        return False
    return all(check_fingerprint(fp, g, proto, floor) is None for fp, g in zip(prints, golden))


__all__ = ["InputSetsChoice", "choose_input_sets"]
