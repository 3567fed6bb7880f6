"""The baseline stage of an item's flow (docs/architecture.md): the strongest frozen baseline on this device -- the
reference, or a declared baseline under ``baselines/<problem>/`` that is correct and, timed paired against the
reference here, faster. A part of :class:`pytest_autotune.flow.KernelFlow`, which starts the sandboxes and times
them (``_start``, ``_init``, ``_timing``)."""

from __future__ import annotations

from typing import Any, Callable, Optional

from .errors import ProblemLoadError
from .gates.base import BaselineChoice, CandidateFailure, CandidateRefusal, GateContext
from .gates.compare import compare_outputs
from .golden import Golden
from .item_memory import settle
from .item_run import ItemRun
from .measure.memory import UNBUDGETED
from .measure.schedule import TimingRefused
from .problems.discovery import baselines_for
from .problems.loader import LoadedProblem
from .problems.model import REFERENCE_BASELINE, ProblemRef, SourceFile
from .sandbox.runner import SandboxFailure
from .seeds import SeedSource


class BaselineStage:
    """Mixed into KernelFlow, whose ``env``, ``_start``, ``_init`` and ``_timing`` it uses."""

    env: Any
    _start: Callable[..., Any]
    _init: Callable[..., dict]
    _timing: Callable[..., Any]

    def baseline_choice(self, pref: ProblemRef, problem_src: SourceFile, problem: LoadedProblem, sizes: dict,
                        golden: Golden, item: Optional[ItemRun] = None) -> BaselineChoice:
        """The strongest frozen baseline on this device: the reference, or a declared baseline (a file under
        ``baselines/<problem>/``) that is correct and, timed paired against the reference here, faster.
        Computed once per problem and device per process; the caller holds the device exclusively."""
        key = (str(pref.path), problem_src.sha256, self.env.device_spec.name)
        if key in self.env.baselines:
            return self.env.baselines[key]
        env = self.env
        seeds = SeedSource(env.nonce, f"{pref.name}|@baseline|{env.device_spec.name}")
        declared = baselines_for(pref) if env.device.framework == "torch" else []
        best = BaselineChoice(REFERENCE_BASELINE, problem_src.sha256, 1.0)
        for b in declared:
            bsrc = SourceFile.read(b.path)  # type: ignore[arg-type]
            try:
                with self._start(self._init(problem_src, sizes, golden.init_seed, "candidate", bsrc, "ModelNew"),
                                 f"baseline-{pref.name}-{b.name}") as box:
                    ctx = GateContext(nodeid=f"{pref.name}@{b.name}", protocol=env.protocol, problem=problem,
                                      candidate=None, device=env.device, seeds=seeds, sizes=sizes,  # type: ignore
                                      sandbox=box, golden=golden)
                    recipes = [{"seed": s} for s in seeds.seeds("correctness", env.protocol.seeds.count)]
                    for recipe in recipes:
                        call = ctx.candidate_outputs([recipe], delay=0.0)[0]
                        bad = call.error or (None if (c := compare_outputs(call.output, golden(recipe), env.protocol,
                                                                           f"seed {recipe['seed']}")).ok else c.reason)
                        if bad:
                            raise ProblemLoadError(str(b.path), f"declared baseline is not correct: {bad}")
                    golden.clear()
                    memory = item.ctx.memory if item is not None else UNBUDGETED
                    with self._start(self._init(problem_src, sizes, golden.init_seed, "baseline", None, "Model"),
                                     f"reference-{pref.name}") as ref:
                        # frozen baselines are trusted code: their sets may be derived without a freshness
                        # check. On the CPU one pair of processes' share of the item budget decides which is
                        # faster (the whole budget took 24 of the main job's 297 s under protocol 7); the GPU
                        # leg keeps the whole budget, as before
                        plan = env.timing_plan()
                        share = plan.process_pairs if env.device_spec.name == "cpu" else 1
                        ev = self._timing(box, ref, seeds, memory=memory, share=share,
                                          derive_spread=plan.derive_spread)
            except (ProblemLoadError, CandidateFailure, CandidateRefusal, TimingRefused, SandboxFailure) as e:
                best.errors.append(f"baseline {b.name} ignored: {getattr(e, 'reason', e)}")
                best.considered[b.name] = None
                continue
            finally:
                if item is not None:
                    settle(env, item, f"declared baseline {b.name}'s sandboxes")
            assert ev.estimate is not None
            best.considered[b.name] = ev.estimate.speedup
            if ev.estimate.speedup > best.gain_vs_reference:
                best.baseline, best.baseline_sha256, best.gain_vs_reference = b, bsrc.sha256, ev.estimate.speedup
        env.baselines[key] = best
        return best


__all__ = ["BaselineStage"]
