"""Copying a store's rows into another through the target's validator: the machinery of ``autotune merge``
(:mod:`.merge`) and of verify's replay (:mod:`.replay`). docs/reference/store.md#merge.

Run by run (in the source's order) the run is inserted unfinished, its study registrations, quarantine,
rejections and results rows are inserted through the target's own triggers (``prev_hash``/``row_hash``
recomputed in the target chain; ``row_mac`` kept, it covers content only), and the run is finished with its
revealed nonce. Quarantine releases follow their quarantine rows; a result whose ``breaker`` names a release is
rewritten to the target's release id (and, as that changes its content, its MAC recomputed with the run's revealed
nonce). A held-out result linked to the result it retests (``retest_of = 'results:<id>'``) and a re-measurement
(``remeasure_of``) are re-mapped the same way to that row's id in the target; if the row it names is not in the
target, the linked row is refused. A study's registration is copied with the run that recorded it; one already in
the target for the same study is skipped as a duplicate when it records the same status and entry digest, and
refused otherwise. Study verdicts follow, their ``registration_id`` re-mapped.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any

from ..errors import ValidatorRefusal
from .columns import REMEASURE_RESULTS_PREFIX, RETEST_RESULTS_PREFIX, mac_tables
from .hashing import canonical_row, nonce_commitment, row_mac
from .writer import StoreReader, StoreWriter

__all__ = ["Copier", "MergeReport", "Sink"]


@dataclass
class MergeReport:
    inserted: int = 0  # rows inserted into the target (runs, results, quarantine, rejections, releases)
    skipped: int = 0  # duplicates: runs already in the target, releases already recorded
    refused: int = 0  # rows the validator (or the MAC check) refused
    sources_refused: int = 0  # whole sources refused (cannot be opened, or fail verify without --force)
    by_table: dict = field(default_factory=dict)  # table -> rows inserted
    messages: list[str] = field(default_factory=list)
    target_ok: bool = True  # the target passes verify after the merge

    @property
    def ok(self) -> bool:
        return self.refused == 0 and self.sources_refused == 0 and self.target_ok

    def render(self) -> str:
        tables = ", ".join(f"{t} {n}" for t, n in self.by_table.items()) or "nothing"
        head = (
            f"{'OK' if self.ok else 'PROBLEMS'}: inserted {self.inserted} row(s) ({tables}), skipped {self.skipped} "
            f"duplicate(s), refused {self.refused} row(s), {self.sources_refused} source(s) refused"
        )
        return "\n".join([head, *self.messages])


class Sink:
    """Where the copier reports what happened (a MergeReport, or verify's problem list)."""

    def __init__(self, report: MergeReport | None = None) -> None:
        self.report = report or MergeReport()
        self.refusals: list[str] = []

    def inserted(self, table: str) -> None:
        self.report.inserted += 1
        self.report.by_table[table] = self.report.by_table.get(table, 0) + 1

    def skipped(self, message: str) -> None:
        self.report.skipped += 1
        self.report.messages.append(message)

    def refused(self, message: str) -> None:
        self.report.refused += 1
        self.report.messages.append(message)
        self.refusals.append(message)

    def note(self, message: str) -> None:
        self.report.messages.append(message)


class Copier:
    """Copies every row of ``src`` into ``target``; ``check_macs``: refuse a row of a finished run whose MAC does
    not match the run's revealed nonce (merge; the replay checks MACs elsewhere)."""

    def __init__(self, src: StoreReader, label: str, target: StoreWriter, sink: Sink, *, check_macs: bool) -> None:
        self.src = src
        self.label = label
        self.target = target
        self.sink = sink
        self.check_macs = check_macs
        self.qmap: dict[int, int] = {}  # source quarantine id -> target quarantine id
        self.relmap: dict[int, int | None] = {}  # source release id -> target release id (None: refused)
        self.rmap: dict[int, int] = {}  # source results id -> target results id
        self.regmap: dict[int, int] = {}  # source study_registrations id -> target id

    def _where(self, table: str, row: dict) -> str:
        ident = f"run {row['run_id']}" if table == "runs" else f"row {row['id']}"
        return f"{self.label}: {table} {ident}"

    def rules_of_its_time(self, table: str, row: dict[str, Any]) -> contextlib.AbstractContextManager[None]:
        """The rules ``row`` is judged by while it is inserted: all of the target's (a replay overrides this)."""
        return contextlib.nullcontext()

    def run(self) -> None:
        for p in self.src.select("SELECT * FROM protocols ORDER BY rowid"):
            try:
                self.target.insert_protocol(p)
            except ValidatorRefusal as e:
                self.sink.refused(f"{self.label}: protocols row {p['sha256']!s:.12}... refused: {e}")
        for run in self.src.select("SELECT * FROM runs ORDER BY rowid"):
            self._copy_run(run)
        for rel in self.src.select("SELECT id FROM quarantine_releases ORDER BY id"):
            self._ensure_release(rel["id"])
        for v in self.src.select("SELECT * FROM study_verdicts ORDER BY id"):
            self._copy_verdict(v)

    def _copy_run(self, run: dict) -> None:
        run_id = run["run_id"]
        existing = self.target.select_one("SELECT * FROM runs WHERE run_id = ?", [run_id])
        if existing is not None:
            if canonical_row("runs", existing) != canonical_row("runs", run):
                self.sink.refused(
                    f"{self.label}: run {run_id} is in the target with different content (a run_id collision); "
                    "its rows were not copied"
                )
            else:
                self.sink.skipped(f"{self.label}: run {run_id} is already in the target; skipped as a duplicate")
            return
        content = {k: v for k, v in run.items() if k not in ("finished_at", "nonce", "prev_hash", "row_hash")}
        try:
            self.target.insert_row("runs", content, nonce=None)
        except ValidatorRefusal as e:
            n = sum(
                self.src.select(f"SELECT count(*) AS n FROM {t} WHERE run_id = ?", [run_id])[0]["n"]
                for t in ("results", "quarantine", "rejections", "study_registrations")
            )
            self.sink.refused(f"{self._where('runs', run)} refused ({e}); its {n} row(s) were not copied")
            return
        self.sink.inserted("runs")
        nonce: bytes | None = None
        if run["nonce"] is not None:
            try:
                nonce = bytes.fromhex(run["nonce"])
            except (ValueError, TypeError):
                nonce = None
            if nonce is None or nonce_commitment(nonce) != run["nonce_sha256"]:
                self.sink.refused(
                    f"{self._where('runs', run)}: the revealed nonce does not match its commitment; the run is "
                    "left unfinished in the target"
                )
                nonce = None
        for table in ("study_registrations", "quarantine", "rejections", "results"):
            for r in self.src.select(f"SELECT * FROM {table} WHERE run_id = ? ORDER BY id", [run_id]):
                if table == "study_registrations" and self._registration_known(r):
                    continue
                self._copy_row(table, r, nonce)
        if nonce is not None:
            try:
                self.target.record_finish(run_id, nonce.hex(), run["finished_at"])
            except ValidatorRefusal as e:
                self.sink.refused(f"{self._where('runs', run)}: could not be finished in the target ({e})")
        elif run["nonce"] is None:
            self.sink.note(f"{self.label}: run {run_id} is unfinished in the source: merged, left unfinished")

    def _remap_release(self, content: dict, nonce: bytes | None) -> None:
        breaker = content.get("breaker")
        if not (isinstance(breaker, str) and breaker.startswith("released:")):
            return
        try:
            src_rel: int | None = int(breaker.split(":", 1)[1])
        except ValueError:
            src_rel = None
        if src_rel is not None:
            tgt_rel = self._ensure_release(src_rel)
            if tgt_rel is not None and tgt_rel != src_rel:
                content["breaker"] = f"released:{tgt_rel}"
                if nonce is not None:
                    content["row_mac"] = row_mac(nonce, canonical_row("results", content))

    def _remap_links(self, row: dict, content: dict, nonce: bytes | None) -> bool:
        """Re-map ``retest_of``/``remeasure_of = results:<id>`` to the target's id; False (reported) when the row
        it names is not in the target."""
        for column, prefix, what in (("retest_of", RETEST_RESULTS_PREFIX, "retests"),
                                     ("remeasure_of", REMEASURE_RESULTS_PREFIX, "re-measures")):
            link = content.get(column)
            if not isinstance(link, str) or not link.startswith(prefix):
                continue
            src_origin = link[len(prefix):]
            ok = src_origin.isascii() and src_origin.isdigit()
            tgt_origin = self._target_result_id(int(src_origin)) if ok else None
            if tgt_origin is None:
                self.sink.refused(
                    f"{self._where('results', row)} refused: it {what} results row {src_origin} of the source "
                    f"({link}), which is not in the target, so its link cannot be kept"
                )
                return False
            if str(tgt_origin) != src_origin:
                content[column] = f"{prefix}{tgt_origin}"
                if nonce is not None:
                    content["row_mac"] = row_mac(nonce, canonical_row("results", content))
        return True

    def _copy_row(self, table: str, row: dict, nonce: bytes | None) -> None:
        content = {k: v for k, v in row.items() if k not in ("id", "prev_hash", "row_hash")}
        if (
            self.check_macs
            and table in mac_tables()
            and nonce is not None
            and row_mac(nonce, canonical_row(table, row)) != row.get("row_mac")
        ):
            self.sink.refused(
                f"{self._where(table, row)} refused: row_mac does not match the run's revealed nonce "
                "(tampered or forged)"
            )
            return
        if table == "results":
            self._remap_release(content, nonce)
            if not self._remap_links(row, content, nonce):
                return
        try:
            with self.rules_of_its_time(table, row):
                new_id = self.target.insert_row(table, content, nonce=None)
        except ValidatorRefusal as e:
            self.sink.refused(f"{self._where(table, row)} refused by the validator: {e}")
            return
        self.sink.inserted(table)
        if table == "quarantine":
            self.qmap[row["id"]] = new_id
        elif table == "results":
            self.rmap[row["id"]] = new_id
        elif table == "study_registrations":
            self.regmap[row["id"]] = new_id

    def _registration_known(self, row: dict) -> bool:
        """A registration of a study the target already has (another store measured arms of the same study):
        skipped when it records the same finding, refused (reported) when it differs. True when handled."""
        have = self.target.select_one(
            "SELECT id, status, entry_sha256 FROM study_registrations WHERE study = ?", [row["study"]])
        if have is None:
            return False
        if (have["status"], have["entry_sha256"]) == (row["status"], row["entry_sha256"]):
            self.regmap[row["id"]] = int(have["id"])
            self.sink.skipped(f"{self._where('study_registrations', row)}: study {row['study']!r} is already "
                              f"registered in the target with the same finding; skipped as a duplicate")
        else:
            self.sink.refused(
                f"{self._where('study_registrations', row)} refused: study {row['study']!r} is registered in the "
                f"target as {have['status']} (entry {str(have['entry_sha256'])[:12]}...) but here as "
                f"{row['status']} (entry {str(row['entry_sha256'])[:12]}...): the two stores disagree on what was "
                "pre-registered; the target keeps its own")
        return True

    def _copy_verdict(self, row: dict) -> None:
        content = {k: v for k, v in row.items() if k not in ("id", "prev_hash", "row_hash")}
        if row.get("registration_id") is not None:
            tgt = self.regmap.get(row["registration_id"])
            if tgt is None:
                found = self.target.select_one("SELECT id FROM study_registrations WHERE study = ?", [row["study"]])
                tgt = int(found["id"]) if found else None
            content["registration_id"] = tgt
        dup = self.target.select_one(
            "SELECT id FROM study_verdicts WHERE study = ? AND created_at = ? AND label = ? AND report = ?",
            [row["study"], row["created_at"], row["label"], row["report"]])
        if dup is not None:
            self.sink.skipped(f"{self._where('study_verdicts', row)} is already in the target; skipped as a duplicate")
            return
        try:
            self.target.insert_row("study_verdicts", content, nonce=None)
        except ValidatorRefusal as e:
            self.sink.refused(f"{self._where('study_verdicts', row)} refused by the validator: {e}")
            return
        self.sink.inserted("study_verdicts")

    def _target_result_id(self, src_id: int) -> int | None:
        """The target's id of source results row ``src_id``: copied in this merge, or already in the target (its
        run was merged before: found by run_id and nodeid). None when it is not there."""
        if src_id in self.rmap:
            return self.rmap[src_id]
        r = self.src.select_one("SELECT run_id, nodeid FROM results WHERE id = ?", [src_id])
        if r is None:
            return None
        found = self.target.select_one("SELECT id FROM results WHERE run_id = ? AND nodeid = ?",
                                       [r["run_id"], r["nodeid"]])
        return int(found["id"]) if found else None

    def _ensure_release(self, src_id: int) -> int | None:
        if src_id in self.relmap:
            return self.relmap[src_id]
        rel = self.src.select_one("SELECT * FROM quarantine_releases WHERE id = ?", [src_id])
        if rel is None:
            self.relmap[src_id] = None
            return None
        tq = self.qmap.get(rel["quarantine_id"])
        if tq is None:
            q = self.src.select_one("SELECT run_id, nodeid FROM quarantine WHERE id = ?", [rel["quarantine_id"]])
            if q is not None:
                found = self.target.select_one("SELECT id FROM quarantine WHERE run_id = ? AND nodeid = ?",
                                               [q["run_id"], q["nodeid"]])
                tq = found["id"] if found else None
        if tq is None:
            self.relmap[src_id] = None
            self.sink.refused(
                f"{self.label}: quarantine_releases row {src_id} refused: its quarantine row "
                f"{rel['quarantine_id']} is not in the target"
            )
            return None
        existing = self.target.select_one("SELECT id FROM quarantine_releases WHERE quarantine_id = ?", [tq])
        if existing is not None:
            self.relmap[src_id] = existing["id"]
            self.sink.skipped(
                f"{self.label}: quarantine_releases row {src_id} is already in the target (release "
                f"{existing['id']}); skipped as a duplicate"
            )
            return existing["id"]
        content = {
            "quarantine_id": tq,
            "reason": rel["reason"],
            "released_by": rel["released_by"],
            "released_at": rel["released_at"],
        }
        try:
            new_id = self.target.insert_row("quarantine_releases", content, nonce=None)
        except ValidatorRefusal as e:
            self.relmap[src_id] = None
            self.sink.refused(f"{self.label}: quarantine_releases row {src_id} refused by the validator: {e}")
            return None
        self.relmap[src_id] = new_id
        self.sink.inserted("quarantine_releases")
        return new_id
