"""The engine quality gate: greedy outputs of a configuration must agree with the default's.

It plays the correctness gate for engines. Each launch answers the same seeded quality prompts greedily
(temperature 0, fixed length); answers are tokenized with the model's tokenizer and compared position by position
with the default's: agreement = matching positions / compared positions, over all prompts. A configuration whose
agreement with its default is below ``[engines].quality_min_agreement`` (0.95, the quality bar the reference
harnesses used) is refused before its speed counts: a lossy KV-cache dtype, a quantization, a sampler change.

The default is also compared with itself across its own launches (``self_agreement``): when an engine's greedy
output is not reproducible here, the gate cannot judge a configuration, and the item is an error rather than a
verdict (docs/guide/engines.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence


@dataclass(frozen=True)
class Agreement:
    matches: int
    compared: int
    prompts: int
    identical_prompts: int
    first_divergence: tuple[int, int] | None  # (prompt index, token position) of the first difference

    @property
    def value(self) -> float:
        return self.matches / self.compared if self.compared else 1.0

    def to_json(self) -> dict:
        return {"agreement": round(self.value, 6), "matches": self.matches, "compared": self.compared,
                "prompts": self.prompts, "identical_prompts": self.identical_prompts,
                "first_divergence": list(self.first_divergence) if self.first_divergence else None}

    def describe(self) -> str:
        where = ""
        if self.first_divergence:
            where = f"; first difference in prompt {self.first_divergence[0]} at token {self.first_divergence[1]}"
        return (f"token agreement {self.value:.3f} ({self.matches}/{self.compared} tokens, "
                f"{self.identical_prompts}/{self.prompts} answers identical{where})")


def token_agreement(reference: Sequence[Sequence[int]], other: Sequence[Sequence[int]]) -> Agreement:
    """Position-wise agreement of two lists of token sequences (one per prompt). Positions beyond the shorter
    answer count as disagreements, so a truncated answer cannot agree."""
    if len(reference) != len(other):
        raise ValueError(f"{len(reference)} reference answers but {len(other)} to compare")
    matches = compared = identical = 0
    first = None
    for i, (a, b) in enumerate(zip(reference, other)):
        n = max(len(a), len(b))
        m = sum(1 for x, y in zip(a, b) if x == y)
        matches += m
        compared += n
        if list(a) == list(b):
            identical += 1
        elif first is None:
            pos = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            first = (i, pos)
    return Agreement(matches, compared, len(reference), identical, first)


@dataclass(frozen=True)
class QualityVerdict:
    passed: bool
    agreement: Agreement
    threshold: float
    launch: int

    def reason(self) -> str:
        return (f"greedy outputs changed: {self.agreement.describe()} with the default's, below the protocol's "
                f"[engines].quality_min_agreement {self.threshold:g} (launch {self.launch}); a configuration "
                "that changes what the model answers is not a speed-up")


def judge(reference: Sequence[Sequence[int]], other: Sequence[Sequence[int]], threshold: float,
          launch: int) -> QualityVerdict:
    a = token_agreement(reference, other)
    return QualityVerdict(a.value >= threshold, a, threshold, launch)
