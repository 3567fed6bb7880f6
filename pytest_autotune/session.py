"""AutotuneSession: one per pytest process. Owns the run record, the store (controller only), the flow and the
outcomes for the report.

Roles: without xdist the one process is the controller and does everything. Under xdist the controller
creates the run (nonce, run id) and hands it to workers through ``workerinput``; workers measure and return
their rows through ``workeroutput``; only the controller writes the database.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import pytest

from .device_choice import device_options, sandbox_cpus
from .errors import AutotuneUsageError
from .keys import WORKER_INPUT_KEY, WORKER_OUTPUT_KEY
from .measure.devices.spec import DeviceSpec
from .measure.lock import DeviceLock
from .options import Options
from .problems.discovery import BUNDLED_ROOT
from .problems.model import KernelItemSpec
from .protocol import Protocol, find_protocol, load_protocol
from .protocol_registry import freeze_status
from .provenance import ProvenanceError, budget_scale, collect, git_state
from .published import attach as attach_published
from .recording import ControllerRecorder, Recorder, WorkerRecorder
from .report.snapshot import Isolation, SessionSnapshot
from .result import ItemOutcome, RunRecord
from .seeds import new_nonce, nonce_commitment
from .study.recorder import StudyRecorder
from .xdist_role import is_worker, runs_items_here

if TYPE_CHECKING:  # pragma: no cover - torch-heavy modules load on first use, not with the plugin
    from .flow import FlowVerdict, KernelFlow
    from .measure.devices.base import Device
    from .sandbox.runner import SandboxPool
    from .store import ResultStore
    from .study.remeasure import RemeasureIndex
    from .study.transfer import OriginIndex


class AutotuneSession:
    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.opts = Options.from_config(config)
        self.budget_scale = budget_scale()  # PYTEST_AUTOTUNE_BUDGET_SCALE, checked before anything runs
        self.is_worker = is_worker(config)
        self.protocol: Protocol = load_protocol(find_protocol(config.rootpath))
        pins: dict[str, str] = {}
        for extra in config.hook.pytest_autotune_frozen_protocols(config=config):
            pins.update(extra or {})
        self.freeze = freeze_status(self.protocol, pins)
        self.device_spec = self._device_spec()
        self._device: Optional["Device"] = None
        if self.device_spec.name != "cpu":  # the CPU is always there; others are checked before collection
            reason = self.device_spec.load().unavailable_reason()
            if reason:
                raise AutotuneUsageError(reason)
        if self.opts.measuring and not self.freeze.frozen and not self.opts.exploratory:
            raise AutotuneUsageError(self.freeze.message)
        self.exploratory = self.opts.exploratory or not self.freeze.frozen
        self.surface = self._check_surface()
        self.outcomes: list[ItemOutcome] = []
        self.store: Optional["ResultStore"] = None
        self.run: Optional[RunRecord] = None
        self.releases: dict[tuple[str, str], int] = {}
        self._flow: Optional["KernelFlow"] = None
        self._pool: Optional["SandboxPool"] = None
        self.origins: Optional["OriginIndex"] = None  # the held-out retest leg's origins (controller, --device=mlx)
        self.studies = StudyRecorder(Path(config.rootpath), study=self.opts.study, arm=self.opts.arm,
                                     iteration=self.opts.iteration, registry=self.opts.study_registry,
                                     manifest=self.opts.study_manifest,
                                     problem_roots=(Path(config.rootpath) / BUNDLED_ROOT, *self.opts.problems))
        self.remeasure: Optional["RemeasureIndex"] = None  # controller, --autotune-remeasure
        if self.opts.remeasure and not self.opts.measuring:
            raise AutotuneUsageError("--autotune-remeasure re-times and records: add --autotune")
        self.recorder: Recorder
        self.config.hook.pytest_autotune_session_start(session=self)  # before the run begins (docs/guide/ci.md)
        early = self._runs_items_here()
        if early and (self.is_worker or not self.opts.measuring):
            self.prestart_sandboxes()  # before this process imports torch (collection): see there
        if self.is_worker:
            wi = config.workerinput[WORKER_INPUT_KEY]  # type: ignore[attr-defined]
            self.nonce = bytes.fromhex(wi["nonce"])
            self.run_id = wi["run_id"]
            self.releases = {(p, s): int(i) for p, s, i in wi["releases"]}
            self.recorder = WorkerRecorder(run=self._worker_run, protocol=self.protocol, nonce=self.nonce,
                                           run_id=self.run_id, studies=self.studies, measuring=self.opts.measuring)
        else:
            self.nonce = new_nonce()
            self.run_id = uuid.uuid4().hex
            if self.opts.measuring:
                self._open_store(prestart=early)
            self.recorder = ControllerRecorder(store=self.store, run=self.run, nonce=self.nonce, studies=self.studies,
                                               remeasure=self.remeasure, written=self._written)

    @property
    def store_errors(self) -> list[str]:
        """Rows the database refused, a run it would not close, study and plot errors: shown, and failing the
        session."""
        return self.recorder.errors

    # ---------------------------------------------------------------------------------------- setup
    def _check_surface(self) -> Optional[dict]:
        if not self.opts.base or self.is_worker:
            return None
        from .gates.surface import SurfaceError, check_surface

        try:
            rep = check_surface(Path(self.config.rootpath), self.opts.base, self.protocol.surface.modifiable)
        except SurfaceError as e:
            raise AutotuneUsageError(str(e)) from None
        if not rep.ok and self.opts.measuring:
            shown = ", ".join(rep.outside[:20]) + (f" (+{len(rep.outside) - 20} more)" if len(rep.outside) > 20 else "")
            raise AutotuneUsageError(
                f"refusing to record: the change since {self.opts.base} ({rep.base_sha[:12]}) touches files outside "
                f"the modification surface [surface].modifiable = {list(self.protocol.surface.modifiable)}: {shown}. "
                "Revert them (gates, protocol, problems and baselines are frozen), or measure without --autotune-base "
                "and --autotune to look without recording.")
        return {"base": rep.base, "base_sha": rep.base_sha, "changed": list(rep.changed),
                "outside": list(rep.outside), "ok": rep.ok}

    def _device_spec(self) -> DeviceSpec:
        specs: dict[str, DeviceSpec] = {}
        for group in self.config.hook.pytest_autotune_devices(config=self.config):
            for spec in group or []:
                specs.setdefault(spec.name, spec)
        if self.opts.device not in specs:
            raise AutotuneUsageError(
                f"--device={self.opts.device} is not a known device; use one of {', '.join(sorted(specs))} "
                "(or register one with the pytest_autotune_devices hook)")
        return specs[self.opts.device]

    @property
    def device(self) -> "Device":
        """The device object (built on first use: importing a device imports torch)."""
        if self._device is None:
            self._device = self.device_spec.load()(index=self._device_index(), options=self._device_options())
        return self._device

    @property
    def framework(self) -> str:
        return self.device_spec.framework

    def _device_index(self) -> int:
        """Under xdist on a host with several devices of the kind (GPUs), worker gwN owns index N mod their count:
        its device object, golden outputs, sandboxes and timing lock all use it (docs/guide/parallel.md)."""
        if not self.is_worker:
            return 0
        return self.worker_number() % max(self.device_spec.load().count(), 1)

    def worker_number(self) -> int:
        """N of xdist worker gwN (0 for the controller or without xdist)."""
        if not self.is_worker:
            return 0
        wid = str(self.config.workerinput.get("workerid", "gw0")).removeprefix("gw")  # type: ignore[attr-defined]
        return int(wid) if wid.isdigit() else 0

    def _device_options(self) -> dict:
        return device_options(self.protocol, self.opts.device, self.opts.device_memory)

    def _open_store(self, prestart: bool = False) -> None:
        from .store import ResultStore

        assert self.opts.db is not None
        self.store = ResultStore.open(self.opts.db)
        if prestart:  # once the store exists, which the jail then hides (hidden_paths); before the run record
            self.prestart_sandboxes()
        self.store.register_protocol(self.protocol, frozen=self.freeze.frozen)
        self.run = self._run_record()
        # origins are read before this run begins: every results row it can link to then belongs to a run that
        # began earlier, so merge/verify (which copy run by run) always meet the origin before the link
        self._load_origins()
        if self.opts.remeasure:
            from .study.remeasure import RemeasureIndex

            self.remeasure = RemeasureIndex.load(self.store, self.opts.remeasure)
        self.store.begin_run(self.run)
        self.releases = {}
        for q in self.store.quarantine_list():
            for rel in q.get("releases") or []:
                self.releases[(q["problem"], q["candidate_sha256"])] = int(rel["id"])

    def _load_origins(self) -> None:
        """The held-out leg links each result to the result it retests (docs/guide/heldout.md: the transfer ratio)."""
        if self.framework != "mlx":
            return
        from .study.transfer import OriginIndex, origin_reports

        idx = OriginIndex(self.opts.device)
        for report in origin_reports([Path(self.config.rootpath) / BUNDLED_ROOT, *self.opts.problems]):
            idx.add_report(report)
        if self.store is not None:
            idx.add_store_rows(self.store.results())
        self.origins = idx

    def annotate(self, outcome: ItemOutcome) -> ItemOutcome:
        """Add the transfer ratio to a held-out result (controller only)."""
        if self.origins is None or outcome.verdict != "accepted" or outcome.measurement is None:
            return outcome
        t = self.origins.transfer(outcome.problem, outcome.candidate, outcome.measurement.speedup)
        if t is None:
            return dataclasses.replace(outcome, warnings=outcome.warnings + (
                "held-out retest: no origin result for this candidate (run it on the origin device first, "
                "or commit a certified report under <suite>/origins/)",))
        details = dict(outcome.details)
        details["transfer"] = t.to_json()
        return dataclasses.replace(outcome, details=details)

    def _run_record(self) -> RunRecord:
        git_sha, dirty = git_state(Path(self.config.rootpath))
        facts = {
            "protocol_sha256": self.protocol.sha256, "protocol_version": self.protocol.version,
            "protocol_frozen": self.freeze.frozen, "git_sha": git_sha, "git_dirty": dirty,
            "device": self.opts.device, "device_fingerprint": self.device.fingerprint(),
            "nonce_sha256": nonce_commitment(self.nonce), "cpu_threads": self.protocol.timing.cpu_threads,
            "modification_surface": self.surface,
            "isolation": self.sandbox_pool().plan.provenance(),
            "process_pairs": self.opts.pairs,
            "max_pairs": self.opts.max_pairs,
            "strict_contract": self.opts.strict_contract or None,
        }
        keys = [k for group in self.config.hook.pytest_autotune_provenance_keys(config=self.config) for k in group]
        try:
            prov = collect(keys, "run", facts)
        except ProvenanceError as e:
            raise AutotuneUsageError(f"cannot record this run: {e}") from None
        return RunRecord(
            run_id=self.run_id,
            started_at=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="microseconds"),
            protocol_version=self.protocol.version, protocol_sha256=self.protocol.sha256,
            protocol_frozen=self.freeze.frozen, exploratory=self.exploratory, git_sha=git_sha, git_dirty=dirty,
            harness_version=prov["harness_version"], harness_sha256=prov["harness_sha256"], host=prov["host"],
            device=self.opts.device, device_fingerprint=prov["device_fingerprint"],
            python_version=prov["python_version"], torch_version=prov["torch_version"],
            numpy_version=prov["numpy_version"], mlx_version=prov.get("mlx_version"),
            nonce_sha256=prov["nonce_sha256"], argv=tuple(prov["argv"]), provenance=prov,
        )

    def worker_input(self) -> dict:
        return {"nonce": self.nonce.hex(), "run_id": self.run_id,
                "releases": [[p, s, i] for (p, s), i in self.releases.items()]}

    def release_for(self, problem: str, candidate_sha256: str) -> Optional[int]:
        return self.releases.get((problem, candidate_sha256))

    # ---------------------------------------------------------------------------------------- items
    def flow(self) -> "KernelFlow":
        if self._flow is None:
            from .build.cache import build_root
            from .flow import FlowEnv, KernelFlow
            from .measure.sampling import KOverride

            p = self.protocol
            self.device.setup(p.timing.cpu_threads)
            pool = self.sandbox_pool()
            gates = [g for group in self.config.hook.pytest_autotune_gates(config=self.config) for g in group]
            keys = [k for group in self.config.hook.pytest_autotune_provenance_keys(config=self.config) for k in group]
            env = FlowEnv(
                protocol=p, device_spec=self.device_spec, device=self.device, pool=pool, nonce=self.nonce,
                gates=gates, measuring=self.opts.measuring, run_id=self.run_id, exploratory=self.exploratory,
                item_provenance=lambda facts: collect(keys, "item", {**facts, "worker": self._worker_id()}),
                lock=DeviceLock(self.device.lock_key),
                budget_scale=self.budget_scale,
                cpus=self._sandbox_cpus(),
                k_override=KOverride.parse(self.opts.calls_per_sample) if self.opts.calls_per_sample else None,
                build_root=build_root(self.opts.db) if self.opts.db is not None else None,
                process_pairs=self.opts.pairs or self.opts.max_pairs,
                pairs_until_target=self.opts.max_pairs is not None, strict_contract=self.opts.strict_contract)
            self._flow = KernelFlow(env)
        return self._flow

    def _sandbox_cpus(self) -> Optional[list[int]]:
        return sandbox_cpus(self.protocol, self.worker_number())

    def _worker_id(self) -> Optional[str]:
        return str(self.config.workerinput.get("workerid")) if self.is_worker else None  # type: ignore[attr-defined]

    def isolation_provenance(self) -> Optional[dict]:
        """The jail of this process's sandboxes (None before the first one started)."""
        return self._pool.plan.provenance() if self._pool is not None else None

    def sandbox_pool(self) -> "SandboxPool":
        """The pool of sandboxes, and with it the jail they run in (decided on first use: docs/design/threat-model.md)."""
        if self._pool is None:
            from .sandbox.jail_session import make_pool

            self._pool = make_pool(self.protocol, self.opts.device, self.opts.db, self.config)
        return self._pool

    def _runs_items_here(self) -> bool:
        """Whether this process may run items (not ``--collect-only``, ``--help``, ``--fixtures``, ``--markers``,
        nor an xdist controller, whose workers run them)."""
        opt = self.config.option
        if any(getattr(opt, name, False) for name in ("collectonly", "help", "showfixtures", "markers")):
            return False
        return runs_items_here(self.config)

    def prestart_sandboxes(self) -> None:
        """Launch the sandbox zygote now (:meth:`SandboxPool.prestart`), at configure: it imports torch and enters
        its jail while this process imports torch itself (the run record's device, the problem files) and
        collects -- on two cores, side by side instead of one after the other. Whatever goes wrong here is left
        for the first item's start, which raises it where it is reported."""
        try:
            self.sandbox_pool().prestart()
        except Exception:  # noqa: BLE001  (the same error comes back, reported, when the first sandbox starts)
            pass

    def drop_unused_sandboxes(self) -> None:
        """No kernel item was collected (an engine-only session, a selection that left none): the zygote started
        at configure goes; the pool and its jail plan (every result's ``isolation``) stay."""
        if self._pool is not None:
            self._pool.drop_unused_zygote()

    def run_item(self, spec: KernelItemSpec) -> "FlowVerdict":
        verdict = attach_published(self.config, self.studies.attach(self.flow().run(spec), spec), spec)
        if not self.is_worker:
            verdict = dataclasses.replace(verdict, outcome=self.annotate(verdict.outcome))
        self.add_verdict(verdict)
        return verdict

    def add_verdict(self, verdict: "FlowVerdict") -> None:
        """Record a verdict (a kernel item's, an engine item's, an unusable problem file's: anything with
        ``outcome``, ``result`` and ``quarantine``): its rows go to the store through the validator (via the
        controller under xdist), its outcome to the report."""
        self.recorder.record(verdict)
        self.outcomes.append(verdict.outcome)

    def _worker_run(self) -> RunRecord:
        if self.run is None:
            self.run = self._run_record()
        return self.run

    def _written(self, row: dict, table: str, row_id: Optional[int]) -> None:
        self.config.hook.pytest_autotune_result_written(row=row, table=table, row_id=row_id, config=self.config)

    # ---------------------------------------------------------------------------------------- xdist
    def ingest_worker(self, output: dict) -> None:
        assert isinstance(self.recorder, ControllerRecorder)
        self.outcomes += self.recorder.ingest(output.get(WORKER_OUTPUT_KEY) or {}, self.annotate)

    def worker_output(self) -> dict:
        assert isinstance(self.recorder, WorkerRecorder)
        return self.recorder.output()

    # ---------------------------------------------------------------------------------------- end
    def close_run(self) -> bool:
        """Controller, end of the session: reveal the nonce (closing the run in the store), then write the JSON
        report and the plots. Returns False when the store refused to close the run (e.g. a forged row: its MAC
        does not match), which is then in ``store_errors`` and in the report."""
        if not isinstance(self.recorder, ControllerRecorder):
            return True
        ok = self.recorder.close()
        self.store = None
        if self.opts.json_path is not None:
            from .report.json_report import build_report, write_report

            write_report(self.opts.json_path, build_report(self.snapshot()))
        if self.opts.plots is not None:
            from .report.plots import write_session_plots

            _, errors = write_session_plots(self.snapshot(), self.opts.plots)
            self.store_errors.extend(errors)
        return ok

    def snapshot(self) -> SessionSnapshot:
        """What the reports are made of, frozen now."""
        from .study.session_report import session_studies

        plan = self._pool.plan if self._pool is not None else None
        return SessionSnapshot(
            run=self.run_json(), run_id=self.run_id, outcomes=tuple(self.outcomes), device=self.opts.device,
            measuring=self.opts.measuring, recorded=self.run is not None and not self.is_worker, db=self.opts.db,
            protocol=self.protocol, frozen=self.freeze.frozen, exploratory=self.exploratory,
            isolation=None if plan is None else Isolation(plan.level, plan.describe(),
                                                          tuple(m.part for m in plan.missing)),
            studies=session_studies(self.studies, self.outcomes, self.opts.device, self.protocol,
                                    self.opts.measuring, self.exploratory, self.remeasure),
            store_errors=tuple(self.store_errors), rootpath=Path(self.config.rootpath),
            sections=self.report_sections())

    def report_sections(self) -> dict:
        """The JSON report's extra sections (the pytest_autotune_report_sections hook; e.g. ``compare``)."""
        out: dict = {}
        for part in self.config.hook.pytest_autotune_report_sections(config=self.config, outcomes=tuple(self.outcomes)):
            out.update(part or {})
        return out

    def finish(self) -> None:
        """Release the sandboxes (every process, at unconfigure)."""
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    def run_json(self) -> dict:
        if self.run is not None:
            row = self.run.as_row()
            row["device_fingerprint"] = self.run.device_fingerprint
            row["argv"] = list(self.run.argv)
            row["provenance"] = self.run.provenance
            row["db"] = str(self.opts.db)
            row["isolation"] = self.run.provenance.get("isolation")
            return row
        return {"run_id": self.run_id, "protocol_version": self.protocol.version,
                "protocol_sha256": self.protocol.sha256, "protocol_frozen": self.freeze.frozen,
                "exploratory": self.exploratory, "device": self.opts.device, "recorded": False,
                "isolation": self._pool.plan.provenance() if self._pool is not None else None}
