"""What an item is made of: a problem, a candidate, the frozen baselines — as files with digests."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Optional

CandidateKind = Literal["torch", "mlx"]


@dataclass(frozen=True)
class SourceFile:
    """A Python source file, pinned to the exact bytes that were read (hashed once, loaded from these bytes)."""

    path: Path
    source: bytes
    sha256: str

    @classmethod
    def read(cls, path: Path) -> "SourceFile":
        data = Path(path).read_bytes()
        return cls(Path(path), data, hashlib.sha256(data).hexdigest())

    def wire(self) -> dict:
        return {"path": str(self.path), "source": self.source, "sha256": self.sha256}


@dataclass(frozen=True)
class ProblemRef:
    """A KernelBench-format problem file."""

    name: str  # file stem, e.g. "19_relu"
    path: Path


@dataclass(frozen=True)
class CandidateRef:
    """A candidate file (``ModelNew`` / ``ModelNewMLX``), or the reference itself for an A/A item."""

    name: str
    path: Optional[Path]  # None: the A/A candidate (the reference model itself)
    kind: CandidateKind

    @property
    def is_reference(self) -> bool:
        return self.path is None

    @property
    def class_name(self) -> str:
        return "ModelNewMLX" if self.kind == "mlx" else "ModelNew"


@dataclass(frozen=True)
class BaselineRef:
    """A frozen baseline: the problem's reference (``path is None``) or a declared baseline file."""

    name: str
    path: Optional[Path]

    @property
    def is_reference(self) -> bool:
        return self.path is None


@dataclass(frozen=True)
class KernelItemSpec:
    """One item: a problem, a candidate, a device. ``item_key`` names its seeds (stable across processes)."""

    nodeid: str
    problem: ProblemRef
    candidate: CandidateRef
    device: str

    @property
    def item_key(self) -> str:
        return f"{self.problem.name}|{self.candidate.name}|{self.device}"


REFERENCE_BASELINE = BaselineRef("reference", None)
AA_CANDIDATE_NAME = "reference-aa"
