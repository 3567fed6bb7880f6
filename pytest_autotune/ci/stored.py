"""The stored run an item is compared with (docs/guide/ci.md): from the store (``RUN_ID`` or ``latest``) or from a
committed JSON report (``--autotune-json`` or ``autotune export RUN --json``), and the refusal to compare runs whose
numbers do not transfer: another protocol digest, another device fingerprint, another torch version."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from ..errors import AutotuneUsageError
from .compare import Numbers

if TYPE_CHECKING:  # pragma: no cover
    from ..store import ResultStore

Key = tuple[str, str, str]  # (problem, candidate, device)

#: fingerprint entries that name *which* device of a kind (or which worker) measured, not what decides a number:
#: two identical GPUs of a pool, or CUDA_VISIBLE_DEVICES that differ between jobs, still compare
IDENTITY_KEYS = frozenset({"uuid", "pci_bus_id", "index", "cuda_visible_devices", "cuda_device_order", "worker",
                           "device_uuid"})

FIX = ("Record the baseline under this protocol on this kind of machine: run the default branch with `pytest "
       "--autotune` there and `autotune export latest --json -o benchmarks/baseline-<device>.json` (docs/guide/ci.md), "
       "or point --autotune-compare at a run recorded under the same conditions.")


@dataclass(frozen=True)
class StoredItem:
    problem: str
    candidate: str
    device: str
    nodeid: Optional[str]
    verdict: str
    gate: Optional[str]
    reason: str
    numbers: Optional[Numbers]

    @classmethod
    def from_report_item(cls, d: dict[str, Any]) -> "StoredItem":
        ci = d.get("ci")
        nums = None
        if d.get("speedup") is not None and ci:
            nums = Numbers(float(d["speedup"]), float(ci[0]), float(ci[1]))
        return cls(problem=str(d["problem"]), candidate=str(d["candidate"]), device=str(d["device"]),
                   nodeid=d.get("nodeid"), verdict=str(d["verdict"]), gate=d.get("gate"), reason=str(d.get("reason", "")),
                   numbers=nums)


@dataclass(frozen=True)
class StoredRun:
    run_id: str
    source: str  # "store <path>" or the JSON file
    protocol_sha256: str
    protocol_version: str
    device: str
    device_fingerprint: dict[str, Any]
    torch_version: Optional[str]
    items: dict[Key, StoredItem]

    @classmethod
    def from_report(cls, report: dict[str, Any], source: str) -> "StoredRun":
        if not isinstance(report, dict) or report.get("schema") != "pytest-autotune/report/1":
            raise AutotuneUsageError(f"--autotune-compare: {source} is not a pytest-autotune JSON report "
                                     "(schema pytest-autotune/report/1); write one with --autotune-json or "
                                     "`autotune export RUN --json`")
        run = report.get("run") or {}
        fp = run.get("device_fingerprint")
        if isinstance(fp, str):
            fp = json.loads(fp)
        if not isinstance(fp, dict) or not run.get("protocol_sha256"):
            raise AutotuneUsageError(f"--autotune-compare: {source} has no recorded run (no device fingerprint): it "
                                     "was written by a session without --autotune. Compare with a measured run.")
        items: dict[Key, StoredItem] = {}
        for d in report.get("items") or []:
            it = StoredItem.from_report_item(d)
            items[(it.problem, it.candidate, it.device)] = it
        return cls(run_id=str(run.get("run_id", "?")), source=source, protocol_sha256=str(run["protocol_sha256"]),
                   protocol_version=str(run.get("protocol_version", "?")), device=str(run.get("device", "?")),
                   device_fingerprint=fp, torch_version=run.get("torch_version"), items=items)

    def to_json(self) -> dict[str, Any]:
        """What an xdist worker is handed (it compares its own items)."""
        items = [{"problem": i.problem, "candidate": i.candidate, "device": i.device, "nodeid": i.nodeid,
                  "verdict": i.verdict, "gate": i.gate, "reason": i.reason,
                  "speedup": i.numbers.speedup if i.numbers else None,
                  "ci": [i.numbers.ci_low, i.numbers.ci_high] if i.numbers else None} for i in self.items.values()]
        return {"schema": "pytest-autotune/report/1", "items": items,
                "run": {"run_id": self.run_id, "protocol_sha256": self.protocol_sha256,
                        "protocol_version": self.protocol_version, "device": self.device,
                        "device_fingerprint": self.device_fingerprint, "torch_version": self.torch_version}}

    def describe(self) -> str:
        return f"run {self.run_id[:12]} ({self.source}, protocol {self.protocol_version}, {len(self.items)} items)"


def is_path(spec: str) -> bool:
    return spec.endswith(".json") or "/" in spec or Path(spec).is_file()


def load_stored(spec: str, *, store: Optional["ResultStore"], db: Optional[Path], device: str,
                exclude: Optional[str], cwd: Path) -> StoredRun:
    """``--autotune-compare=SPEC``: a JSON report path (relative to the invocation directory), ``latest`` or a run
    id of the store (``store``: the session's open store, else ``db`` opened read-only)."""
    if is_path(spec):
        p = (cwd / spec).resolve() if not Path(spec).is_absolute() else Path(spec)
        try:
            report = json.loads(p.read_text())
        except OSError as e:
            raise AutotuneUsageError(f"--autotune-compare={spec}: cannot read {p} ({e.strerror})") from None
        except json.JSONDecodeError as e:
            raise AutotuneUsageError(f"--autotune-compare={spec}: {p} is not JSON ({e})") from None
        return StoredRun.from_report(report, str(p))
    from .export import run_report

    if store is not None:
        return StoredRun.from_report(run_report(store, spec, device=device, exclude=exclude), f"store {store.path}")
    from ..store import ResultStore

    if db is None or not db.exists():
        raise AutotuneUsageError(f"--autotune-compare={spec}: no store at {db}; pass --autotune-db or a JSON report")
    with ResultStore.open(db, readonly=True) as ro:
        return StoredRun.from_report(run_report(ro, spec, device=device, exclude=exclude), f"store {ro.path}")


def comparable(fp: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in fp.items() if k not in IDENTITY_KEYS}


def check_compatible(stored: StoredRun, *, protocol_sha256: str, protocol_version: str, device: str,
                     fingerprint: dict[str, Any], torch_version: Optional[str]) -> None:
    """Refuse (AutotuneUsageError naming the fix) to compare speedups that do not transfer: ratios hold within one
    protocol on one kind of device with one torch, and nowhere else."""
    head = f"--autotune-compare: refusing to compare with {stored.describe()}:"
    if stored.device != device:
        raise AutotuneUsageError(f"{head} it was measured on device {stored.device}, this session on {device}. {FIX}")
    if stored.protocol_sha256 != protocol_sha256:
        raise AutotuneUsageError(
            f"{head} its protocol digest is {stored.protocol_sha256[:12]} (version {stored.protocol_version}) and this "
            f"session's is {protocol_sha256[:12]} (version {protocol_version}); speedups compare only within one "
            f"protocol. {FIX}")
    old, new = comparable(stored.device_fingerprint), comparable(fingerprint)
    diff = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
    if diff:
        shown = "; ".join(f"{k}: stored {old.get(k)!r}, now {new.get(k)!r}" for k in diff[:6])
        raise AutotuneUsageError(f"{head} the device fingerprints differ ({shown}); a speedup measured on one machine "
                                 f"does not transfer to another. {FIX}")
    if stored.torch_version and torch_version and stored.torch_version != torch_version:
        raise AutotuneUsageError(f"{head} it was measured with torch {stored.torch_version}, this session runs torch "
                                 f"{torch_version}; the baseline's speed moves with torch. {FIX}")
