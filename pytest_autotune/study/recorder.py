"""The session side of studies: which items belong to which study, arm and iteration; the registration row
before a study's first row; what the session tells about its studies and anchors (docs/guide/studies.md).

* ``--study=NAME --arm=NAME [--iteration=K]`` attach every item of the session; ``--study-manifest=PATH`` (written
  by ``autotune search``) gives each generated candidate its own iteration and names the study and arm.
* An item whose problem folder has an ``anchors.toml`` entry for it is attached to the study ``anchor:<id>``.
* Results, quarantine and rejections rows carry the study columns (refusals too: an iteration that produced no
  accepted measurement is part of its arm's trajectory, as unusable).
* Before the first row of a study enters the store, the pre-registration check runs (registry.py) and its
  finding is recorded (``study_registrations``); the database refuses a study row without it.
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Protocol, TypeVar

from ..errors import AutotuneUsageError, ValidatorRefusal
from .anchors import ANCHORS_FILE, Anchor, AnchorIndex, anchor_verdict
from .registry import ANCHOR_SECTION, STUDY_REGISTRY, STUDY_SECTION, RegistrationCheck, check_registration
from .search.manifest import Manifest, load_manifest

if TYPE_CHECKING:  # pragma: no cover
    from ..flow import FlowVerdict
    from ..problems.model import KernelItemSpec
    from ..result import ItemOutcome, KernelResult, QuarantineRecord
    from ..store import ResultStore

V = TypeVar("V", bound="_Verdict")


class _Verdict(Protocol):
    """What a kernel's and an engine's verdicts share (``FlowVerdict``, ``EngineVerdict``)."""

    outcome: "ItemOutcome"
    result: Optional["KernelResult"]
    quarantine: Optional["QuarantineRecord"]


NAME_RE = re.compile(r"^[A-Za-z0-9._:+-]{1,200}$")
ANCHOR_PREFIX = "anchor:"


def valid_name(value: str, what: str) -> str:
    if not NAME_RE.match(value or ""):
        raise AutotuneUsageError(f"{what}={value!r}: use 1-200 characters from A-Z a-z 0-9 . _ : + -")
    return value


@dataclass(frozen=True)
class StudyTag:
    study: str
    arm: str
    iteration: Optional[int]

    def columns(self) -> dict[str, Any]:
        return {"study": self.study, "arm": self.arm, "iteration": self.iteration}

    def to_json(self) -> dict[str, Any]:
        return self.columns()


class StudyRecorder:
    def __init__(self, root: Path, *, study: Optional[str], arm: Optional[str], iteration: Optional[int],
                 registry: Optional[str], manifest: Optional[Path], problem_roots: tuple[Path, ...] = ()) -> None:
        self.root = Path(root)
        self.problem_roots = tuple(problem_roots)
        self.manifest: Optional[Manifest] = load_manifest(manifest) if manifest else None
        if self.manifest is not None:
            if study is not None and study != self.manifest.study:
                raise AutotuneUsageError(f"--study={study} but the manifest {self.manifest.path} was generated for "
                                         f"study {self.manifest.study}: drop --study or use the right manifest")
            if arm is not None and arm != self.manifest.arm:
                raise AutotuneUsageError(f"--arm={arm} but the manifest {self.manifest.path} was generated for arm "
                                         f"{self.manifest.arm}: drop --arm or use the right manifest")
            if iteration is not None:
                raise AutotuneUsageError("--iteration and --study-manifest both give iterations: the manifest "
                                         "numbers each generated candidate; drop --iteration")
            study, arm = self.manifest.study, self.manifest.arm
            self.manifest.check_files()
        if (arm is not None or iteration is not None) and study is None:
            raise AutotuneUsageError("--arm/--iteration attach items to a study: add --study=NAME")
        if study is not None and arm is None:
            raise AutotuneUsageError(f"--study={study} needs --arm=NAME (the arm these items belong to)")
        if study is not None and study.startswith(ANCHOR_PREFIX):
            raise AutotuneUsageError(f"--study={study}: names starting with {ANCHOR_PREFIX!r} are the anchors' own")
        self.study = valid_name(study, "--study") if study is not None else None
        self.arm = valid_name(arm, "--arm") if arm is not None else None
        self.iteration = iteration
        self.registry = registry or STUDY_REGISTRY
        self.anchors = AnchorIndex()  # folders are read as items meet them; by id: anchor_by_id()
        self._all_anchors: Optional[AnchorIndex] = None
        self._checks: dict[str, RegistrationCheck] = {}
        self._stored: dict[str, dict] = {}
        self._summary: Optional[dict[str, Any]] = None
        self.errors: list[str] = []

    @property
    def active(self) -> bool:
        return self.study is not None

    # ------------------------------------------------------------------------------------------- tagging
    def anchor_for(self, spec: "KernelItemSpec") -> Optional[Anchor]:
        if spec.candidate.path is None:
            return None
        return self.anchors.lookup(spec.problem.path, spec.candidate.name)

    def in_manifest(self, spec: "KernelItemSpec") -> bool:
        return self.in_manifest_names(spec.problem.name, spec.candidate.name)

    def in_manifest_names(self, problem: str, candidate: str) -> bool:
        return self.manifest is None or self.manifest.lookup(problem, candidate) is not None

    def tag_for(self, spec: "KernelItemSpec") -> Optional[StudyTag]:
        anchor = self.anchor_for(spec)
        if anchor is not None:
            return StudyTag(anchor.study, spec.candidate.name, None)
        return self.tag_for_names(spec.problem.name, spec.candidate.name)

    def tag_for_names(self, problem: str, candidate: str) -> Optional[StudyTag]:
        """The study tag of an item by its row's problem and candidate (kernel and engine items alike)."""
        if self.study is None or self.arm is None:
            return None
        iteration = self.iteration
        if self.manifest is not None:
            entry = self.manifest.lookup(problem, candidate)
            iteration = entry.iteration if entry is not None else None
        return StudyTag(self.study, self.arm, iteration)

    def attach(self, verdict: "FlowVerdict", spec: "KernelItemSpec") -> "FlowVerdict":
        """The verdict with its result/quarantine rows carrying the study columns, and the tag in its details."""
        return self.attach_tag(verdict, self.tag_for(spec))

    def attach_tag(self, verdict: V, tag: Optional[StudyTag], candidate_sha256: Optional[str] = None) -> V:
        """``verdict`` (a kernel's or an engine's) with the study columns on its rows and the tag in its details;
        ``candidate_sha256`` goes into the details for a refusal's row when the verdict has none there."""
        if tag is None:
            return verdict
        if candidate_sha256 and not verdict.outcome.details.get("candidate_sha256"):
            verdict.outcome.details["candidate_sha256"] = candidate_sha256
        o = verdict.outcome
        o.details["study"] = tag.to_json()
        result = dataclasses.replace(verdict.result, **tag.columns()) if verdict.result is not None else None
        quarantine = verdict.quarantine
        if quarantine is not None:
            quarantine = dataclasses.replace(quarantine, result=dataclasses.replace(quarantine.result,
                                                                                    **tag.columns()))
        return dataclasses.replace(verdict, result=result, quarantine=quarantine,  # type: ignore[type-var]
                                   outcome=dataclasses.replace(o, result=result))

    @staticmethod
    def rejection_columns(outcome: "ItemOutcome") -> dict[str, Any]:
        tag = outcome.details.get("study")
        digest = outcome.details.get("candidate_sha256")
        cols: dict[str, Any] = {}
        if tag:
            cols.update(study=tag["study"], arm=tag["arm"], iteration=tag["iteration"])
        if isinstance(digest, str) and len(digest) == 64:
            cols["candidate_sha256"] = digest
        return cols

    # ------------------------------------------------------------------------------------------- registration
    def anchor_by_id(self, anchor_id: str) -> Optional[Anchor]:
        """Every anchors.toml under the problem roots, indexed once (node ids do not reliably name files: pytest
        writes them relative to whatever rootdir it chose)."""
        if self._all_anchors is None:
            self._all_anchors = AnchorIndex(self.problem_roots)
        return self._all_anchors.by_id(anchor_id)

    def _registry_of(self, study: str) -> tuple[str, str, str]:
        """(registry file, relative to the rootdir when inside it; section; entry name) of a study."""
        if study.startswith(ANCHOR_PREFIX):
            aid = study[len(ANCHOR_PREFIX):]
            anchor = self.anchor_by_id(aid)
            f = anchor.registry.resolve() if anchor is not None else Path(ANCHORS_FILE)
            try:
                rel = f.relative_to(self.root.resolve()).as_posix()
            except ValueError:
                rel = str(f)
            return rel, ANCHOR_SECTION, aid
        return self.registry, STUDY_SECTION, study

    def check(self, study: str) -> RegistrationCheck:
        if study not in self._checks:
            registry, section, name = self._registry_of(study)
            self._checks[study] = check_registration(self.root, registry, section, name, study=study)
        return self._checks[study]

    def ensure_registered(self, store: "ResultStore", run_id: str, nonce: bytes, study: str) -> None:
        """Record the study's registration before its first row (controller). A registration already in the store
        stays as it is: the first row decided it."""
        from ..store.studies import record_registration, registration

        if study in self._stored:
            return
        existing = registration(store, study)
        if existing is None:
            check = self.check(study)
            try:
                record_registration(store, check.as_row(run_id), nonce=nonce)
            except ValidatorRefusal as e:
                self.errors.append(f"study {study}: its registration was refused by the database ({e.rule}): {e}")
                return
            existing = registration(store, study)
        if existing is not None:
            self._stored[study] = existing

    def status(self, study: str) -> tuple[bool, list[str]]:
        """(registered and unchanged, reasons it is exploratory) as far as this session knows."""
        reasons: list[str] = []
        stored = self._stored.get(study)
        current = self._checks.get(study)
        if stored is not None:
            if stored["status"] != "registered":
                reasons.append(f"not registered before its first result: {stored['detail']}")
            elif current is not None and current.entry_sha256 != stored["entry_sha256"]:
                reasons.append(f"its entry in {stored['registry']} changed since the study's first result "
                               f"(run {stored['run_id']})")
        elif current is not None and not current.registered:
            reasons.append(current.detail)
        return not reasons, reasons

    def recheck_stored(self) -> None:
        """Re-read the registry entry of every study the store holds a registration for, so an entry edited after
        the study's first result is seen (the check is otherwise cached from the study's first row)."""
        for study, row in self._stored.items():
            section, name = ((ANCHOR_SECTION, study[len(ANCHOR_PREFIX):]) if study.startswith(ANCHOR_PREFIX)
                             else (STUDY_SECTION, study))
            self._checks[study] = check_registration(self.root, row["registry"], section, name, study=study)

    # ------------------------------------------------------------------------------------------- reporting
    def summary(self, outcomes: list["ItemOutcome"], device: str, band: float, measuring: bool) -> dict[str, Any]:
        """What the session says about its studies and anchors (terminal and JSON); computed once, at the end of
        the session, after every row was written."""
        if self._summary is not None:
            return self._summary
        self.recheck_stored()
        studies: dict[tuple[str, str], Counter] = {}
        iterations: dict[tuple[str, str], set] = {}
        anchors = []
        for o in outcomes:
            tag = o.details.get("study")
            if not tag:
                continue
            key = (tag["study"], tag["arm"])
            if tag["study"].startswith(ANCHOR_PREFIX):
                anchors.append(o)
                continue
            studies.setdefault(key, Counter())[o.verdict] += 1
            if tag.get("iteration") is not None:
                iterations.setdefault(key, set()).add(tag["iteration"])
        out_studies = []
        for (study, arm), counts in studies.items():
            if study not in self._checks:
                self.check(study)
            ok, reasons = self.status(study)
            stored = self._stored.get(study)
            its = sorted(iterations.get((study, arm), set()))
            out_studies.append({
                "study": study, "arm": arm, "items": sum(counts.values()), "usable": counts.get("accepted", 0),
                "refused": {k: v for k, v in counts.items() if k != "accepted"},
                "iterations": its, "recorded": measuring,
                "registration": (stored["status"] if stored else self._checks[study].status),
                "registration_detail": (stored["detail"] if stored else self._checks[study].detail),
                "exploratory": not ok, "exploratory_reasons": reasons,
            })
        out_anchors = []
        for o in anchors:
            study = o.details["study"]["study"]
            anchor = self.anchor_by_id(study[len(ANCHOR_PREFIX):])
            if anchor is None:
                self.errors.append(f"{o.nodeid}: anchor {study} is in no anchors.toml under the problem roots")
                continue
            if study not in self._checks and study not in self._stored:
                self.check(study)
            ok, reasons = self.status(study)
            measured = o.measurement.speedup if (o.measurement is not None and o.verdict == "accepted") else None
            v = anchor_verdict(anchor, measured, device, band, ok, "; ".join(reasons))
            out_anchors.append({"anchor": anchor.id, "nodeid": o.nodeid, "item_verdict": o.verdict,
                                **v.to_json(), "registered": ok, "exploratory_reasons": reasons,
                                "hardware": anchor.hardware, "source": anchor.source})
        self._summary = {"studies": out_studies, "anchors": out_anchors, "errors": list(self.errors)}
        return self._summary
