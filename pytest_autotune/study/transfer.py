"""The held-out retest leg: link a result to the result it retests and record the transfer ratio.

A candidate certified on one device (say ``candidates/02_relu/relu.py`` on the CPU or an H200) is retested on a
held-out device by its port with the same stem (``candidates/02_relu/mlx/relu.py`` on ``--device=mlx``). The
baseline is re-derived there (the MLX port of the reference, timed on the held-out device), never carried over.
``transfer_ratio = held-out speedup / origin speedup``; a certified kernel that reads below 1.0x on the held-out
leg "does not transfer".

Origins are looked up, newest first, in the run's own store (results on another device) and then in committed
origin reports (JSON reports of certified runs, ``<suite>/origins/*.json``), so a clean checkout can retest.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Optional

ORIGINS_DIR = "origins"


@dataclass(frozen=True)
class Origin:
    ref: str  # "results:<id>" (this store) or "report:<file>#<run_id>/<nodeid>"
    device: str
    speedup: float
    ci_low: float
    ci_high: float
    run_id: str
    source: str  # human readable

    @property
    def certified(self) -> bool:
        return self.ci_low > 1.0


@dataclass(frozen=True)
class Transfer:
    origin: Origin
    heldout_speedup: float
    ratio: float

    @property
    def transfers(self) -> bool:
        return self.heldout_speedup >= 1.0

    def verdict(self) -> str:
        if not self.origin.certified:
            return "origin not certified (its CI includes 1.0x)"
        return "transfers" if self.transfers else "does not transfer"

    def to_json(self) -> dict[str, Any]:
        return {"retest_of": self.origin.ref, "origin_device": self.origin.device,
                "origin_speedup": self.origin.speedup, "origin_ci": [self.origin.ci_low, self.origin.ci_high],
                "origin_run_id": self.origin.run_id, "heldout_speedup": self.heldout_speedup,
                "transfer_ratio": self.ratio, "verdict": self.verdict()}


class OriginIndex:
    """Accepted results by (problem, candidate), excluding the held-out device itself."""

    def __init__(self, heldout_device: str) -> None:
        self.device = heldout_device
        self._by_key: dict[tuple[str, str], Origin] = {}

    def add_store_rows(self, rows: Iterable[dict]) -> None:
        for r in sorted(rows, key=lambda r: int(r.get("id", 0))):
            if r.get("device") == self.device or r.get("kind", "kernel") != "kernel":
                continue
            self._put(r["problem"], r["candidate"], Origin(
                f"results:{r['id']}", r["device"], float(r["speedup"]), float(r["ci_low"]), float(r["ci_high"]),
                r["run_id"], "this store"), prefer=True)

    def add_report(self, path: Path) -> None:
        try:
            rep = json.loads(Path(path).read_text())
        except (OSError, ValueError):
            return
        run = rep.get("run") or {}
        for it in rep.get("items", []):
            if it.get("verdict") != "accepted" or it.get("speedup") is None or it.get("device") == self.device:
                continue
            ci = it.get("ci") or [it["speedup"], it["speedup"]]
            self._put(it["problem"], it["candidate"], Origin(
                f"report:{Path(path).name}#{run.get('run_id', '?')}/{it['nodeid']}", it["device"],
                float(it["speedup"]), float(ci[0]), float(ci[1]), str(run.get("run_id", "")),
                f"{Path(path).name}"), prefer=False)

    def _put(self, problem: str, candidate: str, origin: Origin, prefer: bool) -> None:
        """Store rows (``prefer``) always win, newest last; a report fills a key no store row holds."""
        current = self._by_key.get((problem, candidate))
        if prefer or current is None or not current.ref.startswith("results:"):
            self._by_key[(problem, candidate)] = origin

    def lookup(self, problem: str, candidate: str) -> Optional[Origin]:
        return self._by_key.get((problem, candidate))

    def transfer(self, problem: str, candidate: str, heldout_speedup: float) -> Optional[Transfer]:
        o = self.lookup(problem, candidate)
        if o is None or o.speedup <= 0:
            return None
        return Transfer(o, heldout_speedup, heldout_speedup / o.speedup)


def origin_reports(problem_roots: Iterable[Path]) -> list[Path]:
    out: list[Path] = []
    for root in problem_roots:
        root = Path(root)
        for d in [root, *[p for p in root.glob("*") if p.is_dir()]]:
            od = d / ORIGINS_DIR
            if od.is_dir():
                out += sorted(od.glob("*.json"))
    return out
