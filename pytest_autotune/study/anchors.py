"""External anchors: published numbers re-measured here (``anchors.toml``, docs/guide/anchors.md).

An anchor names a published ratio (KernelBench's H100 eager vs ``torch.compile`` timings), the problem written at
the published shapes, the compiled candidate, the hardware and software it was published for, and -- written
before measuring -- the mechanism expected to make our number diverge and in which direction. Each anchor item
is a study of its own (``anchor:<id>``), so its entry is pre-registered like a study's: the plugin records, at its
first measurement, whether the entry was committed (docs/guide/studies.md).

Verdicts (band: ``[bands].anchoring``, ±10%):

* ``in band (±10%)``: measured / published within 1 ± band;
* ``divergent (pre-registered mechanism)``: outside the band, in the direction the entry predicted (``lower``,
  ``higher`` or ``either``; ``none`` predicts the band), and the entry was committed before the anchor's first
  measurement and is unchanged;
* ``divergent, unexplained``: outside the band otherwise;
* on another device than the published one's kind (the CPU dry run), ``dry run on <device>: not comparable``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional

from .registry import ANCHOR_SECTION, RegistryError, parse_registry

ANCHORS_FILE = "anchors.toml"
#: how the measured ratio is expected to diverge from the published one: "none" predicts it in band (any divergence
#: is then unexplained); "either" explains a divergence either way (a weak prediction: say why in the mechanism)
DIRECTIONS = ("lower", "higher", "either", "none")
_REQUIRED = ("problem", "candidate", "source", "source_url", "sizes", "shapes", "dtype", "hardware", "software",
             "published_ratio", "published_timing", "mechanism", "expected_direction", "device")
_OPTIONAL = ("kernelbench_problem", "kernelbench_commit", "kernelbench_sha256", "published_eager_ms",
             "published_compiled_ms", "notes")


@dataclass(frozen=True)
class Anchor:
    id: str
    problem: str  # problem file stem beside the anchors file
    candidate: str
    source: str
    source_url: str
    sizes: Mapping[str, int]  # the published problem's size globals
    shapes: str
    dtype: str
    hardware: str
    software: str
    published_ratio: float
    published_timing: str
    mechanism: str
    expected_direction: str
    device: str  # the device kind the published number is comparable with ("cuda")
    registry: Path  # the anchors.toml it came from
    extra: Mapping[str, Any]

    @property
    def study(self) -> str:
        return f"anchor:{self.id}"

    def to_json(self) -> dict:
        return {"id": self.id, "problem": self.problem, "candidate": self.candidate, "source": self.source,
                "source_url": self.source_url, "sizes": dict(self.sizes), "shapes": self.shapes,
                "dtype": self.dtype, "hardware": self.hardware, "software": self.software,
                "published_ratio": self.published_ratio, "published_timing": self.published_timing,
                "mechanism": self.mechanism, "expected_direction": self.expected_direction, "device": self.device,
                **dict(self.extra)}


def parse_anchors(path: Path) -> dict[str, Anchor]:
    path = Path(path)
    data = parse_registry(path.read_text(encoding="utf-8"), str(path))
    table = data.get(ANCHOR_SECTION) or {}
    if not isinstance(table, dict):
        raise RegistryError(f"{path}: [{ANCHOR_SECTION}] must hold one table per anchor: [anchor.<id>]")
    out: dict[str, Anchor] = {}
    for aid, raw in table.items():
        where = f"{path}: [anchor.{aid}]"
        if not isinstance(raw, dict):
            raise RegistryError(f"{where} must be a table")
        missing = [k for k in _REQUIRED if k not in raw]
        if missing:
            raise RegistryError(f"{where}: missing {', '.join(missing)} (an anchor states its source, shapes, dtype, "
                                "hardware, published ratio and, before measuring, the mechanism; docs/guide/anchors.md)")
        unknown = sorted(set(raw) - set(_REQUIRED) - set(_OPTIONAL))
        if unknown:
            raise RegistryError(f"{where}: unknown key {unknown[0]!r}")
        ratio = raw["published_ratio"]
        if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not ratio > 0:
            raise RegistryError(f"{where}: published_ratio must be a positive number")
        if raw["expected_direction"] not in DIRECTIONS:
            raise RegistryError(f"{where}: expected_direction must be one of {', '.join(DIRECTIONS)}")
        if not isinstance(raw["mechanism"], str) or len(raw["mechanism"].strip()) < 20:
            raise RegistryError(f"{where}: mechanism must say, before measuring, what is expected to make the "
                                "number diverge (at least 20 characters)")
        sizes = raw["sizes"]
        if not isinstance(sizes, dict) or not all(isinstance(v, int) for v in sizes.values()):
            raise RegistryError(f"{where}: sizes must be a table of the problem's integer size globals")
        out[aid] = Anchor(
            id=aid, problem=str(raw["problem"]), candidate=str(raw["candidate"]), source=str(raw["source"]),
            source_url=str(raw["source_url"]), sizes=dict(sizes), shapes=str(raw["shapes"]), dtype=str(raw["dtype"]),
            hardware=str(raw["hardware"]), software=str(raw["software"]), published_ratio=float(ratio),
            published_timing=str(raw["published_timing"]), mechanism=raw["mechanism"].strip(),
            expected_direction=str(raw["expected_direction"]), device=str(raw["device"]), registry=path,
            extra={k: raw[k] for k in _OPTIONAL if k in raw})
    return out


class AnchorIndex:
    """Anchors by (problem file, candidate), from the ``anchors.toml`` beside problem files (read once per
    folder), and by id."""

    def __init__(self, roots: Iterable[Path] = ()) -> None:
        self._folders: dict[Path, dict[tuple[str, str], Anchor]] = {}
        self._by_id: dict[str, Anchor] = {}
        for root in roots:
            root = Path(root)
            if root.is_dir():
                for f in sorted(root.rglob(ANCHORS_FILE)):
                    self._folder(f.parent)

    def _folder(self, folder: Path) -> dict[tuple[str, str], Anchor]:
        folder = folder.resolve()
        if folder not in self._folders:
            f = folder / ANCHORS_FILE
            anchors = parse_anchors(f) if f.is_file() else {}
            self._folders[folder] = {(a.problem, a.candidate): a for a in anchors.values()}
            for a in anchors.values():
                self._by_id.setdefault(a.id, a)
        return self._folders[folder]

    def lookup(self, problem_path: Path, candidate: str) -> Optional[Anchor]:
        return self._folder(Path(problem_path).resolve().parent).get((Path(problem_path).stem, candidate))

    def by_id(self, anchor_id: str) -> Optional[Anchor]:
        return self._by_id.get(anchor_id)


@dataclass(frozen=True)
class AnchorVerdict:
    verdict: str
    measured_ratio: Optional[float]
    published_ratio: float
    relative: Optional[float]  # measured / published
    detail: str

    def to_json(self) -> dict:
        return {"verdict": self.verdict, "measured_ratio": self.measured_ratio,
                "published_ratio": self.published_ratio, "relative": self.relative, "detail": self.detail}


def anchor_verdict(anchor: Anchor, measured_ratio: Optional[float], device: str, band: float,
                   registered: bool, registration_detail: str = "") -> AnchorVerdict:
    """The anchor's verdict for a measured ratio (our speedup of the compiled candidate over eager)."""
    pub = anchor.published_ratio
    if measured_ratio is None:
        return AnchorVerdict("not measured", None, pub, None, "no accepted measurement of the anchor item")
    rel = measured_ratio / pub
    if device != anchor.device:
        return AnchorVerdict(f"dry run on {device}: not comparable", measured_ratio, pub, rel,
                             f"published for {anchor.hardware} ({anchor.device}); measured {measured_ratio:.3g}x on "
                             f"{device} at the dry-run sizes")
    if abs(rel - 1.0) <= band + 1e-12:
        return AnchorVerdict(f"in band (±{band:.0%})", measured_ratio, pub, rel,
                             f"measured {measured_ratio:.3g}x vs published {pub:.3g}x ({rel:.2f} of it)")
    went = "lower" if rel < 1.0 else "higher"
    predicted = anchor.expected_direction in (went, "either")
    if predicted and registered:
        return AnchorVerdict("divergent (pre-registered mechanism)", measured_ratio, pub, rel,
                             f"measured {measured_ratio:.3g}x vs published {pub:.3g}x ({rel:.2f}), {went} as the "
                             f"entry predicted before measuring: {anchor.mechanism}")
    why = (f"the entry predicted {anchor.expected_direction}" if not predicted else
           f"the mechanism was not pre-registered ({registration_detail or 'entry not committed before measuring'})")
    return AnchorVerdict("divergent, unexplained", measured_ratio, pub, rel,
                         f"measured {measured_ratio:.3g}x vs published {pub:.3g}x ({rel:.2f}), {went}; {why}")
