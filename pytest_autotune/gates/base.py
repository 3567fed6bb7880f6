"""The gate interface. Gates are plugins (``pytest_autotune_gates``); the built-in ones use the same interface.

A gate looks at the evidence gathered so far for one item (:class:`GateContext`) and either passes (returns
``None``) or refuses (returns a :class:`GateOutcome`). Gates run in the controller; they may ask the item's
candidate sandbox for more outputs (``ctx.candidate_outputs``, which returns
:class:`~pytest_autotune.gates.received.CandidateCall` s) and compute golden outputs (``ctx.golden``), but they
never hand golden outputs to a sandbox.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Optional

from ..measure.memory import UNBUDGETED, MemoryPlan

if TYPE_CHECKING:  # pragma: no cover
    from ..measure.devices.base import Device
    from ..measure.schedule import TimingEvidence
    from ..problems.contract import Contract
    from ..problems.loader import LoadedProblem
    from ..problems.model import BaselineRef, CandidateRef
    from ..protocol import Protocol
    from ..result import Measurement
    from ..sandbox.runner import Sandbox, SandboxFailure
    from ..seeds import SeedSource
    from .received import CandidateCall

STAGES = ("correctness", "probe", "integrity", "breaker")


@dataclass(frozen=True)
class GateOutcome:
    gate: str  # the report's gate name: correctness | probe | integrity | timing | breaker | <custom>
    reason: str
    verdict: str = "rejected"  # rejected | quarantined | error
    details: dict = field(default_factory=dict)

    @classmethod
    def refuse(cls, gate: str, reason: str, **details: Any) -> "GateOutcome":
        return cls(gate, reason, "rejected", details)

    @classmethod
    def quarantine(cls, gate: str, reason: str, **details: Any) -> "GateOutcome":
        return cls(gate, reason, "quarantined", details)


class Gate:
    """Subclass and set ``name`` and ``stages``; implement :meth:`check`."""

    name: ClassVar[str] = "gate"
    stages: ClassVar[tuple[str, ...]] = ()
    #: only run when timing is recorded (``--autotune``); correctness-only runs skip the gate
    needs_timing: ClassVar[bool] = False

    def check(self, ctx: "GateContext", stage: str) -> Optional[GateOutcome]:  # pragma: no cover - interface
        raise NotImplementedError


@dataclass
class BaselineChoice:
    """The strongest frozen baseline of a problem on a device."""

    baseline: "BaselineRef"
    baseline_sha256: str
    gain_vs_reference: float  # strongest / reference speedup (1.0 when the reference is strongest)
    considered: dict = field(default_factory=dict)  # declared baseline name -> speedup vs reference (None: unusable)
    errors: list = field(default_factory=list)


@dataclass
class Evidence:
    """What the built-in gates found, typed, for the report (``details`` of the item's JSON). The flow never reads
    it to build a database row: what the store needs (seeds, breaker status, probe summary) the flow derives from
    the item itself, so a gate added through the hook cannot make the database refuse a row by omitting an entry.
    Gates of your own put what they want to show in ``GateContext.details``."""

    tamper_seen: list = field(default_factory=list)  # names a sandbox reported changed, after import
    max_rel_err: Optional[float] = None  # worst relative error over the correctness seeds
    probes: dict = field(default_factory=lambda: {"status": "disabled"})  # the probe gate's summary
    breaker_release: Optional[int] = None  # a recorded human release that let a >breaker speedup through
    wall_clock: Optional[dict] = None
    device_clock: Optional[dict] = None
    cpu_time: Optional[dict] = None
    idle: Optional[dict] = None
    verified_rounds: list = field(default_factory=list)
    #: the contract the item was judged by (problems/contract.py): its clauses and where they come from
    contract: Optional[dict] = None
    #: what probes beyond the contract found (clause, input, what was wrong, the fix); never a refusal unless strict
    findings: list = field(default_factory=list)
    #: how floating outputs were judged: the rule, the float64 oracle's availability, the worst errors in ulps
    accuracy: Optional[dict] = None
    #: KernelBench's own check on its trials (gates/kernelbench.py); never a refusal
    kernelbench: Optional[dict] = None

    def as_json(self) -> dict:
        return {k: v for k, v in dataclasses.asdict(self).items() if v not in (None, [], {})}


@dataclass
class GateContext:
    nodeid: str
    protocol: "Protocol"
    problem: "LoadedProblem"
    candidate: "CandidateRef"
    device: "Device"
    seeds: "SeedSource"
    sizes: dict
    sandbox: Optional["Sandbox"] = None
    measuring: bool = False
    golden: Callable[[dict], Any] = lambda recipe: None  # a pytest_autotune.golden.Golden
    baseline: Optional[BaselineChoice] = None
    timing: Optional["TimingEvidence"] = None
    measurement: Optional["Measurement"] = None
    candidate_sha256: Optional[str] = None
    import_tamper: list = field(default_factory=list)
    threads_added_by_import: int = 0
    warnings: list = field(default_factory=list)
    evidence: Evidence = field(default_factory=Evidence)
    #: free-form facts for the report (custom gates may add theirs; nothing downstream depends on them)
    details: dict = field(default_factory=dict)
    #: what every process of the item may hold on the device (measure/memory.py); unbudgeted on the CPU
    memory: MemoryPlan = field(default_factory=lambda: UNBUDGETED)
    #: the inputs the candidate answers for (problems/contract.py); None: every probe refuses (protocols 1-9)
    contract: Optional["Contract"] = None
    #: the reference's float64 outputs on a recipe (pytest_autotune/oracle.py), or None: the tolerance rule
    oracle: Optional[Callable[[dict], Any]] = None

    def oracle_outputs(self, recipe: dict) -> Any:
        """The float64 oracle's outputs on ``recipe``, or None where the rule is the tolerance or the oracle cannot
        be had (why: ``evidence.accuracy["oracle"]``)."""
        if self.oracle is None:
            return None
        from ..oracle import OracleUnavailable

        try:
            return self.oracle(recipe)
        except OracleUnavailable as e:
            acc = self.evidence.accuracy = self.evidence.accuracy or {"rule": "float64-oracle"}
            acc.setdefault("oracle", f"unavailable: {e}; judged by [tolerance.<dtype>] instead")
            return None

    def oracle_perturbed(self, recipe: dict) -> Optional[Callable[[], Any]]:
        """A callable for the oracle's outputs on ``recipe``'s inputs moved by an ulp (asked for only where an output
        fails in the plain unit: gates/accuracy.py), or None."""
        perturbed = getattr(self.oracle, "perturbed", None)
        return None if perturbed is None else (lambda: perturbed(recipe))

    def candidate_outputs(self, recipes: list[dict], delay: Optional[float] = None,
                          meanwhile: Optional[Callable[[], Any]] = None) -> list["CandidateCall"]:
        """Run the candidate in its sandbox on ``recipes``; one :class:`CandidateCall` per recipe, its outputs
        opened on the controller's device. ``meanwhile`` runs in the controller while the sandbox computes (the
        golden outputs)."""
        from ..measure.devices.memfd import ExportError
        from .received import receive_calls

        assert self.sandbox is not None
        wait = self.protocol.correctness.recheck_delay_s if delay is None else delay
        plan = self.memory
        if not plan.golden_concurrent and hasattr(self.golden, "clear"):
            self.golden.clear()  # the last golden output goes before the candidate's call (the plan's order)
        self.sandbox.send({"cmd": "outputs", "recipes": recipes, "recheck_delay": wait,
                           "release_memory": plan.release_between_calls}, phase="correctness")
        if meanwhile is not None and plan.golden_concurrent:
            meanwhile()
        reply = self.sandbox.receive(phase="correctness")
        if reply.get("oom"):
            raise memory_failure(reply, "the candidate's correctness calls", plan)
        if meanwhile is not None and not plan.golden_concurrent:
            meanwhile()
        if not reply.get("ok"):
            if reply.get("refusal"):
                raise CandidateRefusal(str(reply.get("error")))
            raise CandidateFailure(str(reply.get("error")))
        self.evidence.tamper_seen.extend(reply.get("tamper", []))
        results = reply.get("results")
        if not isinstance(results, list) or len(results) != len(recipes):
            raise CandidateRefusal("the sandbox answered for a different number of inputs")
        try:
            return receive_calls(self.device, recipes, results, wait)
        except ExportError as e:
            raise CandidateRefusal(f"an output handle is not what it claims: {e}") from None


def memory_failure(reply: dict, what: str, plan: MemoryPlan) -> "SandboxFailure":
    """A sandbox ran out of device memory: an error of the item (not the arm's answer), with the plan's numbers."""
    from ..measure.memory import fmt_bytes
    from ..sandbox.runner import SandboxFailure

    free = reply.get("free_bytes")
    planned = (f"; the item's memory plan had {fmt_bytes(plan.available_bytes)} to share, "
               f"stages {', '.join(f'{k} {fmt_bytes(v)}' for k, v in plan.needs.items())}") if plan.budgeted else ""
    return SandboxFailure("memory", f"{what} ran out of device memory ({reply.get('error')})"
                          + (f"; {fmt_bytes(free)} free afterwards" if isinstance(free, int) else "") + planned
                          + ": free the device (other processes hold memory), or declare smaller sizes for this "
                          "device in the problem's AUTOTUNE_SIZES")


class CandidateFailure(Exception):
    """The candidate raised inside the sandbox while a gate asked for outputs."""


class CandidateRefusal(Exception):
    """The candidate's sandbox is in a state the harness refuses to work in (a torch mode left pushed, a forged
    output handle): an integrity refusal."""
