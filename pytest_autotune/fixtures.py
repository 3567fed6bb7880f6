"""Fixtures for hand-written benchmark tests: ``device``, ``paired_seeds``, ``frozen_baseline``, ``autotune``.

::

    @pytest.mark.autotune_problem("benchmarks/kernels/level1/02_relu.py")
    def test_my_relu(autotune, frozen_baseline):
        outcome = autotune.run("kernels/my_relu.py")          # full flow: sandbox, gates, timing, store
        assert outcome.verdict == "accepted"
        assert outcome.measurement is None or outcome.measurement.ci_low > 1.0

    def test_probe_my_fn(autotune):
        autotune.probe(MyModelNew, "benchmarks/kernels/level1/02_relu.py")   # in-process cheat probes

``run`` measures a candidate *file* exactly like a collected item (sandboxed, recorded with ``--autotune``).
``probe`` runs the hypothesis cheat probes in-process on trusted code (nothing is recorded).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional

import pytest

from .errors import ProblemLoadError
from .keys import SESSION_KEY
from .problems.loader import LoadedProblem
from .problems.model import CandidateKind, CandidateRef, KernelItemSpec, ProblemRef, SourceFile
from .result import ItemOutcome
from .seeds import SeedSource
from .session import AutotuneSession

if TYPE_CHECKING:  # pragma: no cover - torch/hypothesis load when a fixture is used, not with the plugin
    from .gates.base import BaselineChoice
    from .measure.devices.base import Device


def _session(request: pytest.FixtureRequest) -> AutotuneSession:
    return request.config.stash[SESSION_KEY]


def _resolve(request: pytest.FixtureRequest, path: str | Path) -> Path:
    p = Path(path)
    if p.is_absolute():
        return p
    for base in (Path(request.node.path).parent, Path(request.config.rootpath)):
        if (base / p).exists():
            return (base / p).resolve()
    raise pytest.UsageError(f"autotune: {path} not found next to {request.node.path} nor under the rootdir")


def _marked_problem(request: pytest.FixtureRequest) -> Optional[Path]:
    m = request.node.get_closest_marker("autotune_problem")
    return _resolve(request, m.args[0]) if m and m.args else None


@pytest.fixture
def device(request: pytest.FixtureRequest) -> "Device":
    """The ``--device`` this session measures on (set up with the protocol's thread count)."""
    s = _session(request)
    s.flow()  # sets the device up once
    return s.device


@pytest.fixture
def paired_seeds(request: pytest.FixtureRequest) -> tuple[int, ...]:
    """``[seeds].count`` seeds derived from this run's nonce and the test's node id: unpredictable before the
    run, the same for both arms of a comparison."""
    s = _session(request)
    return SeedSource(s.nonce, request.node.nodeid).seeds("paired", s.protocol.seeds.count)


@dataclass(frozen=True)
class FrozenBaseline:
    name: str
    sha256: str
    problem: LoadedProblem
    choice: Optional["BaselineChoice"]
    model_class: type

    def build(self, init_seed: int = 0) -> Any:
        return self.problem.build(self.model_class, init_seed, "baseline")


@pytest.fixture
def frozen_baseline(request: pytest.FixtureRequest) -> FrozenBaseline:
    """The strongest frozen baseline of the problem named by ``@pytest.mark.autotune_problem(path)``.
    With ``--autotune`` it is chosen by timing (reference vs declared baselines); without, it is the reference."""
    path = _marked_problem(request)
    if path is None:
        raise pytest.UsageError("frozen_baseline needs @pytest.mark.autotune_problem('path/to/problem.py')")
    s = _session(request)
    src = SourceFile.read(path)
    problem = LoadedProblem.load(src)
    choice = None
    cls = problem.module.Model
    name, sha = "reference", src.sha256
    if s.opts.measuring:
        flow = s.flow()
        from .golden import Golden

        sizes = problem.sizes_for(s.opts.device)
        init_seed = SeedSource(s.nonce, f"{path.stem}|@init|{s.opts.device}").seed("init")
        golden = Golden(problem, s.device, sizes, init_seed)
        with flow.env.lock.exclusive():
            choice = flow.baseline_choice(ProblemRef(path.stem, path), src, problem, sizes, golden)
        name, sha = choice.baseline.name, choice.baseline_sha256
        if not choice.baseline.is_reference:
            from .problems.loader import load_class

            cls = load_class(SourceFile.read(choice.baseline.path), "ModelNew", "baseline")  # type: ignore[arg-type]
    return FrozenBaseline(name, sha, problem, choice, cls)


class AutotuneFixture:
    def __init__(self, request: pytest.FixtureRequest) -> None:
        self.request = request
        self.session = _session(request)

    def run(self, candidate: str | Path, problem: str | Path | None = None) -> ItemOutcome:
        """Measure a candidate file against the problem (argument or marker) through the full flow."""
        ppath = _resolve(self.request, problem) if problem else _marked_problem(self.request)
        if ppath is None:
            raise pytest.UsageError("autotune.run needs a problem: pass problem= or mark the test")
        cpath = _resolve(self.request, candidate)
        kind: CandidateKind = "mlx" if self.session.framework == "mlx" else "torch"
        spec = KernelItemSpec(nodeid=f"{self.request.node.nodeid}::{cpath.stem}", problem=ProblemRef(ppath.stem, ppath),
                              candidate=CandidateRef(cpath.stem, cpath, kind), device=self.session.opts.device)
        return self.session.run_item(spec).outcome

    def probe(self, candidate: Callable[..., Any] | type, problem: str | Path | None = None,
              examples: Optional[int] = None, seed: Optional[int] = None) -> dict:
        """In-process hypothesis cheat probes of trusted code: ``candidate`` is a ModelNew-like class (built with
        the problem's init inputs) or a callable taking the problem's inputs. Raises AssertionError with a
        replayable seed and recipe on the first mismatch."""
        import torch

        from .gates.compare import compare_outputs
        from .gates.probes import ProbeMismatch, _Skip, describe_recipe, run_probe
        from .problems.inputs import inputs_signature, materialize

        ppath = _resolve(self.request, problem) if problem else _marked_problem(self.request)
        if ppath is None:
            raise pytest.UsageError("autotune.probe needs a problem: pass problem= or mark the test")
        lp = LoadedProblem.load(SourceFile.read(ppath))
        s = self.session
        sizes = lp.sizes_for(s.opts.device)
        seeds = SeedSource(s.nonce, self.request.node.nodeid)
        init_seed = seeds.seed("init")
        with lp.sizes(sizes):
            ref = lp.build_reference(init_seed)
            cand = lp.build(candidate, init_seed, "candidate") if isinstance(candidate, type) else candidate
        probe_seed = seed if seed is not None else seeds.seed("probe")

        def check_one(recipe: dict) -> None:
            r = {**recipe, "sizes": {**sizes, **(recipe.get("sizes") or {})}}
            try:
                with torch.no_grad():
                    golden = ref(*materialize(lp, r))
            except (ProblemLoadError, RuntimeError) as e:
                raise _Skip(str(e)) from None
            if isinstance(golden, torch.Tensor) and golden.is_floating_point() and not bool(torch.isfinite(golden).all()):
                raise _Skip("reference not finite")
            with torch.no_grad():
                got = cand(*materialize(lp, r))
            c = compare_outputs(got, golden, s.protocol)
            if not c.ok:
                raise ProbeMismatch(c.reason, recipe)

        sig = inputs_signature(materialize(lp, {"seed": init_seed, "sizes": sizes}))
        n = s.protocol.probes.max_examples if examples is None else examples
        try:
            return run_probe(check_one, sig, {}, n, probe_seed, s.protocol.probes.deadline_s)
        except ProbeMismatch as e:
            raise AssertionError(f"probe failed: {e} on {describe_recipe(e.recipe)} (seed={probe_seed})") from None


@pytest.fixture
def autotune(request: pytest.FixtureRequest) -> AutotuneFixture:
    """Measure candidate files (``run``) or probe trusted callables (``probe``) from a hand-written test."""
    return AutotuneFixture(request)
