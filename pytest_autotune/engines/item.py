"""An engine item's values (docs/guide/engines.md): what the item is (``EngineItemSpec``), what the session gives it
(``EngineEnv``), what comes back (``EngineVerdict``), and the per-item context and per-launch outcomes that
:mod:`.launch` fills and :mod:`.run` turns into a verdict.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Optional

from ..protocol import Protocol
from ..result import ItemOutcome, KernelResult, QuarantineRecord
from .adapters.base import EngineAdapter, FlagSet, LaunchEvidence
from .declaration import AA_CONFIG, EngineConfig, EngineDeclaration
from .delivery import DeliveryVerdict
from .install import Installation
from .loadgen import Request, WindowStats
from .model import MadeModel
from .quality import QualityVerdict
from .workload import PromptBuilder, Workload

SERVED_NAME = "autotune-tiny"
DEFAULT_ARM = "default"
CONFIG_ARM = "config"


@dataclass(frozen=True)
class EngineItemSpec:
    nodeid: str
    declaration: EngineDeclaration
    config: EngineConfig
    workload: Workload
    device: str

    @property
    def engine(self) -> str:
        return self.declaration.engine

    @property
    def problem(self) -> str:
        """The row's problem: engine and workload (the "problem" an engine configuration is measured on)."""
        return f"{self.engine}:{self.workload.name}"

    @property
    def aa(self) -> bool:
        """The default against itself (``--autotune-aa``): no treatment, so no delivery to judge."""
        return self.config.name == AA_CONFIG and not self.config.flags

    @property
    def item_key(self) -> str:
        """Stable across processes: the paired seeds are derived from it and the run's nonce."""
        return f"engine|{self.engine}|{self.declaration.path.name}|{self.config.name}|{self.workload.name}"


@dataclass
class EngineEnv:
    protocol: Protocol
    adapters: Mapping[str, EngineAdapter]
    nonce: bytes
    run_id: str
    exploratory: bool
    measuring: bool
    log_dir: Path
    model_dir: Path
    progress: Callable[[str], None] = lambda s: None
    release_lookup: Callable[[str, str], Optional[int]] = lambda p, s: None
    item_provenance: Callable[[dict], dict] = lambda facts: dict(facts)
    stats_resamples: Optional[int] = None


@dataclass
class EngineVerdict:
    outcome: ItemOutcome
    result: Optional[KernelResult] = None
    quarantine: Optional[QuarantineRecord] = None



class EngineUnavailable(Exception):
    """The engine cannot be used here (not installed, unsupported): the item is skipped with the fix."""


class Refused(Exception):
    """A gate refused the item (``verdict`` "rejected"), or the default arm failed (``verdict`` "error")."""

    def __init__(self, gate: str, reason: str, verdict: str = "rejected") -> None:
        super().__init__(reason)
        self.gate = gate
        self.reason = reason
        self.verdict = verdict


@dataclass
class LaunchOutcome:
    arm: str
    index: int
    pair: int
    flags: FlagSet
    effective: Any
    quality_ids: list[list[int]]
    windows: list[WindowStats] = field(default_factory=list)
    warmup: list[WindowStats] = field(default_factory=list)
    evidence: Optional[LaunchEvidence] = None
    record: dict = field(default_factory=dict)
    quality: Optional[QualityVerdict] = None
    delivery: Optional[DeliveryVerdict] = None

    def summary(self) -> dict[str, Any]:
        rps = [w.requests_per_s for w in self.windows]
        return {"arm": self.arm, "index": self.index, "pair": self.pair, "launch": self.record,
                "effective_config_sha256": _digest(self.effective.to_json()) if self.effective else None,
                "requests_per_s": [round(x, 4) for x in rps],
                "output_tokens_per_s": [round(w.output_tokens_per_s, 2) for w in self.windows],
                "warmup_requests_per_s": [round(w.requests_per_s, 4) for w in self.warmup],
                "latency_s": [w.latency_s for w in self.windows], "ttft_s": [w.ttft_s for w in self.windows],
                "itl_s": [w.itl_s for w in self.windows],
                "errors": sum(w.errors for w in self.windows + self.warmup),
                "gauge_maxima": self.evidence.gauge_maxima if self.evidence else {},
                "quality": self.quality.agreement.to_json() if self.quality else None,
                "delivery": self.delivery.to_json() if self.delivery else None}


def _digest(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def slug(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", s)[:120]


def launch_order(pairs: int) -> list[tuple[int, str]]:
    """(pair, arm) in launch order: ABBA across pairs — default first in even pairs, configuration first in odd."""
    out: list[tuple[int, str]] = []
    for j in range(pairs):
        arms = (DEFAULT_ARM, CONFIG_ARM) if j % 2 == 0 else (CONFIG_ARM, DEFAULT_ARM)
        out += [(j, a) for a in arms]
    return out


@dataclass
class ItemContext:
    spec: EngineItemSpec
    adapter: EngineAdapter
    inst: Installation
    model: MadeModel
    default_flags: FlagSet
    config_flags: FlagSet
    quality_reqs: list[Request]
    warmup_reqs: list[list[Request]]
    windows: list[list[Request]]
    log_dir: Path
    launches: list[LaunchOutcome]
    details: dict
    self_agreements: list = field(default_factory=list)
    pending_delivery: list = field(default_factory=list)

    def __post_init__(self) -> None:
        self._builder = PromptBuilder(self.model.path / "tokenizer.json")

    def builder_ids(self, text: str) -> list[int]:
        return self._builder.ids(text)

    def reference_quality(self) -> Optional[list[list[int]]]:
        return next((lo.quality_ids for lo in self.launches if lo.arm == DEFAULT_ARM), None)

    def reference_evidence(self) -> Optional[LaunchEvidence]:
        for lo in reversed(self.launches):
            if lo.arm == DEFAULT_ARM and lo.evidence is not None:
                return lo.evidence
        return None

    def quality_summary(self) -> dict[str, Any]:
        vs = [lo.quality for lo in self.launches if lo.quality is not None]
        return {"threshold": None if not vs else vs[0].threshold,
                "config_vs_default": [v.agreement.to_json() for v in vs],
                "default_vs_itself": [a.to_json() for a in self.self_agreements],
                "min_agreement": min((v.agreement.value for v in vs), default=None)}


def base_env() -> dict[str, str]:
    """What a server inherits from us: a minimal, explicit environment (no proxies, no CUDA/OMP settings, no
    credentials), so that both arms start in the same one and it is recorded."""
    keep = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "USER", "LOGNAME")
    return {k: os.environ[k] for k in keep if k in os.environ}
