"""Prometheus text exposition (``/metrics`` of vLLM, SGLang and llama.cpp's server), parsed with
``prometheus_client``'s own parser into a flat table of samples.

Counters are read before and after the measured windows of a launch: their difference (prefix-cache hits,
speculative drafts) is how a treatment shows that it ran (docs/guide/engines.md, treatment delivery).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Optional


@dataclass(frozen=True)
class Sample:
    name: str
    labels: Mapping[str, str]
    value: float


@dataclass(frozen=True)
class MetricsSnapshot:
    samples: tuple[Sample, ...] = field(default_factory=tuple)

    def find(self, name: str) -> list[Sample]:
        """Samples named ``name``; a counter is also found by its name without ``_total``."""
        names = {name, name + "_total"} if not name.endswith("_total") else {name}
        return [s for s in self.samples if s.name in names]

    def total(self, name: str) -> Optional[float]:
        """Sum over label sets (engines, models); None when the metric is absent."""
        found = self.find(name)
        return sum(s.value for s in found) if found else None

    def labels_of(self, name: str) -> list[Mapping[str, str]]:
        return [s.labels for s in self.find(name)]

    def names(self) -> set[str]:
        return {s.name for s in self.samples}

    def delta(self, before: "MetricsSnapshot", name: str) -> Optional[float]:
        a, b = before.total(name), self.total(name)
        if b is None:
            return None
        return b - (a or 0.0)


def parse_prometheus(text: str) -> MetricsSnapshot:
    from prometheus_client.parser import text_string_to_metric_families

    out: list[Sample] = []
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.append(Sample(s.name, dict(s.labels), float(s.value)))
    return MetricsSnapshot(tuple(out))
