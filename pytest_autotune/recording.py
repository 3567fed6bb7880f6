"""Where a verdict's rows go (docs/architecture.md#modules-one-job-each): chosen once per process.

* :class:`ControllerRecorder` (no xdist, or the xdist controller) writes rows through the store's validator and
  takes in what workers send;
* :class:`WorkerRecorder` (an xdist worker) checks each row against an in-memory copy of the same validator and
  hands it to the controller through ``workeroutput``. Only the controller writes the database.

:func:`verdict_rows` is the one place a verdict becomes rows, and :func:`with_transfer` the one place the held-out
retest's transfer ratio is merged into a results row (for the controller's own items and for workers' rows).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Optional
from typing import Protocol as TypingProtocol

from .errors import StoreError, ValidatorRefusal
from .problems.contract import contract_record
from .result import ItemOutcome, Rejection, RunRecord

if TYPE_CHECKING:  # pragma: no cover
    from .flow import FlowVerdict
    from .protocol import Protocol
    from .store import ResultStore
    from .study.recorder import StudyRecorder
    from .study.remeasure import RemeasureIndex

#: how long a rejection's reason may be in the database
REASON_CHARS = 4000


def with_transfer(row: dict, outcome: ItemOutcome) -> dict:
    """A results row with the held-out retest link of its outcome (``details.transfer``, set by the controller's
    origin index), or the row unchanged."""
    t = outcome.details.get("transfer")
    if not t:
        return row
    return {**row, "retest_of": t["retest_of"], "transfer_ratio": t["transfer_ratio"]}


def rejection_detail(o: ItemOutcome) -> str:
    """The rejection row's ``detail``: the reason; for a build that failed, the compilers' whole output after it
    (``details.build.log``, at most build/compiler_log.py ``LOG_CHARS``)."""
    log = (o.details.get("build") or {}).get("log") if o.gate == "build" else None
    return o.reason[:REASON_CHARS] + (f"\n\nbuild log:\n{log}" if log else "")


def verdict_rows(verdict: "FlowVerdict", run_id: str, studies: "StudyRecorder") -> list[tuple[str, dict]]:
    """(table, row) of everything a verdict records: its result or quarantine row, and a rejections row unless
    it was accepted."""
    o = verdict.outcome
    rows: list[tuple[str, dict]] = []
    if verdict.result is not None:
        rows.append(("results", with_transfer(verdict.result.as_row(), o)))
    elif verdict.quarantine is not None:
        rows.append(("quarantine", verdict.quarantine.as_row()))
    if o.verdict != "accepted":
        rejection = Rejection(run_id, o.nodeid, o.problem, o.candidate, o.device, o.gate or "", o.verdict,
                              rejection_detail(o), contract_record(o.details))
        rows.append(("rejections", {**rejection.as_row(), **studies.rejection_columns(o)}))
    return rows


class Recorder(TypingProtocol):
    errors: list[str]

    def record(self, verdict: "FlowVerdict") -> None: ...


@dataclass
class ControllerRecorder:
    """Writes rows to the store (``store`` is None when the session does not record: nothing is written)."""

    store: Optional["ResultStore"]
    run: Optional[RunRecord]
    nonce: bytes
    studies: "StudyRecorder"
    remeasure: Optional["RemeasureIndex"]
    written: Callable[[dict, str, Optional[int]], None]  # (row, table, row id): the result_written hook
    errors: list[str] = field(default_factory=list)

    def record(self, verdict: "FlowVerdict") -> None:
        if self.store is None or self.run is None:
            return
        for table, row in verdict_rows(verdict, self.run.run_id, self.studies):
            self.write(table, row, verdict.outcome.nodeid)

    def write(self, table: str, row: dict, nodeid: str) -> Optional[int]:
        assert self.store is not None and self.run is not None
        if isinstance(row.get("study"), str):  # the pre-registration check is recorded before a study's first row
            self.studies.ensure_registered(self.store, self.run.run_id, self.nonce, row["study"])
        if table == "results" and self.remeasure is not None:
            row = self.remeasure.link(row)
        try:
            rid = self.store.insert_row(table, row, nonce=self.nonce if table in ("results", "quarantine") else None)
        except ValidatorRefusal as e:
            self.errors.append(f"{nodeid}: {table} row refused by the database validator ({e.rule}): {e}")
            return None
        self.written(row, table, rid)
        return rid

    def ingest(self, payload: dict, annotate: Callable[[ItemOutcome], ItemOutcome]) -> list[ItemOutcome]:
        """A worker's ``workeroutput``: its outcomes (annotated here, where the origins are) and its rows,
        written through the validator. Returns the outcomes."""
        outcomes = [annotate(ItemOutcome.from_json(o)) for o in payload.get("outcomes", [])]
        by_node = {o.nodeid: o for o in outcomes}
        self.errors.extend(payload.get("store_errors", []))
        if self.store is not None:
            for r in payload.get("rows", []):
                row, nodeid = r["row"], r.get("nodeid", "?")
                if r["table"] == "results" and nodeid in by_node:
                    row = with_transfer(row, by_node[nodeid])
                self.write(r["table"], row, nodeid)
        return outcomes

    def close(self) -> bool:
        """Reveal the nonce (closing the run in the store). False when the store refused to close the run (e.g. a
        forged row: its MAC does not match), which is then in ``errors``."""
        if self.store is None or self.run is None:
            return True
        ok = True
        try:
            self.store.finish_run(self.run.run_id, self.nonce)
        except StoreError as e:
            self.errors.append(f"closing the run failed: {e}")
            ok = False
        finally:
            self.store.close()
            self.store = None
        return ok


@dataclass
class WorkerRecorder:
    """Checks rows against the validator in memory and keeps them, with the outcomes, for the controller."""

    run: Callable[[], RunRecord]  # the run record, built on first use (a worker's rows need it for the dry run)
    protocol: "Protocol"
    nonce: bytes
    run_id: str
    studies: "StudyRecorder"
    measuring: bool
    errors: list[str] = field(default_factory=list)
    rows: list[dict] = field(default_factory=list)  # {"table", "row", "nodeid"}
    outcomes: list[dict] = field(default_factory=list)

    def record(self, verdict: "FlowVerdict") -> None:
        self.outcomes.append(verdict.outcome.to_json())
        if not self.measuring:
            return
        from .store import dry_run_insert

        for table, row in verdict_rows(verdict, self.run_id, self.studies):
            try:
                dry_run_insert(self.run(), self.protocol, table, row, nonce=self.nonce)
            except ValidatorRefusal as e:
                self.errors.append(f"{verdict.outcome.nodeid}: {table} row refused by rule {e.rule}: {e}")
            self.rows.append({"table": table, "row": row, "nodeid": verdict.outcome.nodeid})

    def output(self) -> dict[str, Any]:
        return {"rows": self.rows, "outcomes": self.outcomes, "store_errors": self.errors}
