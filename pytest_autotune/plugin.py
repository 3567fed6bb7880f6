"""The pytest plugin: options, configuration, collection of kernel items, verdicts, summary, xdist glue.

Every (problem × candidate × device) is a :class:`KernelItem` whose node id reads
``benchmarks/kernels/level1/19_relu.py::clamp[cpu]``. The flow runs in the item's ``setup`` (so a crash, hang
or memory blow-up of the sandbox is a pytest *error*), and ``runtest`` turns a refusal into a *failure* whose
message names the gate.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, Iterator, Optional

import pytest

from . import hookspec
from .builtin import BuiltinParts
from .engines import plugin as engines_plugin
from .errors import AutotuneUsageError, AutotuneWarning, ProblemLoadError
from .keys import SESSION_KEY, VERDICT_KEY, WORKER_INPUT_KEY, WORKER_OUTPUT_KEY
from .options import add_options
from .problems.discovery import BUNDLED_ROOT, candidates_for, is_problem_file
from .problems.loader import LoadedProblem
from .problems.model import AA_CANDIDATE_NAME, CandidateRef, KernelItemSpec, ProblemRef, SourceFile
from .session import AutotuneSession

pytest_plugins = ["pytest_autotune.build.prebuild", "pytest_autotune.published"]  # build pool; published numbers


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(hookspec)


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "autotune: a kernel item collected by pytest-autotune")
    config.addinivalue_line("markers", "autotune_problem(path): the KernelBench problem a hand-written test measures")
    config.addinivalue_line("markers", "anchor: an external anchor (anchors.toml); run only when -m names it")
    config.pluginmanager.register(BuiltinParts(), "autotune-builtin")
    from . import fixtures

    config.pluginmanager.register(fixtures, "autotune-fixtures")
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(XdistHooks(), "autotune-xdist")
    from .ci.plugin import register as register_ci

    register_ci(config)  # before the session: it checks the stored run before the run begins (docs/guide/ci.md)
    try:
        session = AutotuneSession(config)
    except AutotuneUsageError as e:
        raise pytest.UsageError(str(e)) from None
    config.stash[SESSION_KEY] = session
    _extend_collection_args(config, session)
    from .study.unusable import add_manifest_arg

    add_manifest_arg(config, session)  # a search manifest's unusable iterations are items of the manifest file
    config.pluginmanager.register(engines_plugin.PLUGIN, "autotune-engines")


def _extend_collection_args(config: pytest.Config, session: AutotuneSession) -> None:
    """``--problems DIR`` adds DIR to what pytest collects; run with no path arguments (and no testpaths) it
    replaces the invocation directory, so `pytest --problems X` from anywhere collects X only."""
    dirs = [str(p) for p in session.opts.problems]
    if not dirs:
        return
    source = getattr(config, "args_source", None)
    if source == pytest.Config.ArgsSource.INVOCATION_DIR:
        config.args[:] = dirs
        return
    have = [Path(a.split("::")[0]).resolve() for a in config.args]
    for d in session.opts.problems:
        if not any(d == h or h in d.parents for h in have):
            config.args.append(str(d))


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Controller: close the run in the store and write the JSON report before the terminal summary, so store
    problems show there and fail the session."""
    s = session.config.stash.get(SESSION_KEY, None)
    if s is None or s.is_worker:
        return
    closed = s.close_run()
    if (not closed or s.store_errors) and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_unconfigure(config: pytest.Config) -> None:
    session = config.stash.get(SESSION_KEY, None)
    if session is not None:
        session.finish()
    _freeze_heap_at_exit()


_FREEZE_AT_EXIT: list[bool] = []


def _freeze_heap_at_exit() -> None:
    """Once per process: ``gc.freeze()`` when the interpreter exits (an atexit handler: never in a process that
    goes on after ``pytest.main``). The collector's final passes then skip the heap built so far (torch's: ~0.5 s
    of a ~0.9 s exit here, docs/results/test-suite.md#process-exits-jail-and-catalog-2026-12-02-e421431).
    Everything this plugin must write is written and closed before: the store and the JSON report at
    sessionfinish, the sandboxes at unconfigure; the other atexit handlers still run, and refcounted objects are
    still freed."""
    if not _FREEZE_AT_EXIT:
        import atexit
        import gc

        atexit.register(gc.freeze)
        _FREEZE_AT_EXIT.append(True)


def _roots(config: pytest.Config) -> list[Path]:
    session = config.stash.get(SESSION_KEY, None)
    extra = session.opts.problems if session else []
    return [Path(config.rootpath) / BUNDLED_ROOT, *extra]


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> Optional[pytest.Collector]:
    if file_path.suffix == ".py" and is_problem_file(file_path, _roots(parent.config)):
        return ProblemFile.from_parent(parent, path=file_path)
    if file_path.suffix == ".json":
        from .study.unusable import collect_manifest

        return collect_manifest(file_path, parent)
    return None


class ProblemFile(pytest.File):
    """A KernelBench problem file. Loading it (trusted code) tells whether it is usable; candidates are
    only listed here, never imported (that happens in the sandbox)."""

    def collect(self) -> Iterator[pytest.Item]:
        session: AutotuneSession = self.config.stash[SESSION_KEY]
        device = session.opts.device
        pref = ProblemRef(self.path.stem, self.path)
        try:
            problem = LoadedProblem.load(SourceFile.read(self.path))
        except ProblemLoadError as e:
            yield BrokenFileItem.from_parent(self, name=f"load[{device}]", reason=f"{e.path}: {e.reason}")
            return
        kind = "mlx" if session.framework == "mlx" else "torch"
        if kind == "mlx" and problem.mlx_model is None:
            return
        cands = candidates_for(pref, session.opts.candidates, kind, device)  # type: ignore[arg-type]
        if session.opts.aa:
            cands = [CandidateRef(AA_CANDIDATE_NAME, None, kind), *cands]  # type: ignore[arg-type]
        for c in cands:
            spec = KernelItemSpec(nodeid="", problem=pref, candidate=c, device=device)
            yield KernelItem.from_parent(self, name=f"{c.name}[{device}]", spec=spec)


class AutotuneFailure(Exception):
    """A gate refused the item (pytest failure)."""


class AutotuneItemError(Exception):
    """The item could not be measured: sandbox crash, hang, memory limit (pytest error)."""


class KernelItem(pytest.Item):
    def __init__(self, *, spec: KernelItemSpec, **kw: Any) -> None:
        super().__init__(**kw)
        self.spec = KernelItemSpec(nodeid=self.nodeid, problem=spec.problem, candidate=spec.candidate,
                                   device=spec.device)
        self.add_marker(pytest.mark.autotune)
        self.extra_keyword_matches.update({spec.problem.name, spec.candidate.name, spec.device})

    def setup(self) -> None:
        session: AutotuneSession = self.config.stash[SESSION_KEY]
        verdict = session.run_item(self.spec)
        self.stash[VERDICT_KEY] = verdict
        o = verdict.outcome
        self.user_properties.append(("autotune_verdict", o.verdict))
        if o.gate:
            self.user_properties.append(("autotune_gate", o.gate))
        if o.measurement is not None:
            m = o.measurement
            self.user_properties += [("speedup", f"{m.speedup:.4f}"), ("ci_low", f"{m.ci_low:.4f}"),
                                     ("ci_high", f"{m.ci_high:.4f}"), ("baseline", o.baseline or ""),
                                     ("n_pairs", str(m.n_pairs))]
        if o.verdict == "error":
            raise AutotuneItemError(f"ERROR ({o.gate}): {o.reason}")

    def runtest(self) -> None:
        verdict = self.stash[VERDICT_KEY]
        o = verdict.outcome
        for w in o.warnings:
            warnings.warn(AutotuneWarning(f"{self.spec.problem.name}/{self.spec.candidate.name}: {w}"), stacklevel=1)
        if o.verdict == "quarantined":
            raise AutotuneFailure(o.reason)
        if o.verdict == "rejected":
            raise AutotuneFailure(f"REJECTED by {o.gate}: {o.reason}")

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        if isinstance(excinfo.value, (AutotuneFailure, AutotuneItemError)):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self) -> tuple[Path, Optional[int], str]:
        return self.path, None, f"{self.spec.problem.name} / {self.spec.candidate.name} on {self.spec.device}"


class BrokenFileItem(pytest.Item):
    """A problem file that cannot be used: one failed item naming the file and the reason."""

    def __init__(self, *, reason: str, **kw: Any) -> None:
        super().__init__(**kw)
        self.reason = reason

    def runtest(self) -> None:
        session: AutotuneSession = self.config.stash[SESSION_KEY]
        from .flow import FlowVerdict
        from .result import ItemOutcome

        # recorded like any refusal: the report, and the rejections table when the session records
        session.add_verdict(FlowVerdict(ItemOutcome(nodeid=self.nodeid, kind="kernel", problem=self.path.stem,
                                                    candidate="-", device=session.opts.device, verdict="rejected",
                                                    gate="load", reason=self.reason)))
        self.user_properties += [("autotune_verdict", "rejected"), ("autotune_gate", "load")]
        raise AutotuneFailure(f"REJECTED by load: {self.reason}")

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        if isinstance(excinfo.value, AutotuneFailure):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self) -> tuple[Path, Optional[int], str]:
        return self.path, None, f"{self.path.name}: unusable problem file"


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list) -> None:
    """Anchors get the ``anchor`` marker (and run only when ``-m`` names it); a search manifest or a re-measure
    selects its own items (docs/guide/studies.md)."""
    s = config.stash.get(SESSION_KEY, None)
    if s is None:
        return
    from .study.selection import select_items

    keep, drop = select_items(s, items, config)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_collection_finish(session: pytest.Session) -> None:
    """The sandboxes' zygote was started at configure (:meth:`AutotuneSession.prestart_sandboxes`); with no kernel
    item to run in this process, it goes now."""
    config = session.config
    s = config.stash.get(SESSION_KEY, None)
    if s is None:
        return
    if not any(isinstance(item, KernelItem) for item in session.items):
        s.drop_unused_sandboxes()


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    session = config.stash.get(SESSION_KEY, None)
    if session is None or session.is_worker or not session.outcomes:
        return
    from .report.terminal import write_summary
    from .study.session_report import write_terminal

    snap = session.snapshot()
    write_summary(terminalreporter, snap)
    write_terminal(terminalreporter, snap)


class XdistHooks:
    """Registered only when pytest-xdist is installed (its hooks are unknown otherwise)."""

    def pytest_configure_node(self, node: Any) -> None:
        session: AutotuneSession = node.config.stash[SESSION_KEY]
        node.workerinput[WORKER_INPUT_KEY] = session.worker_input()

    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        session: AutotuneSession = node.config.stash[SESSION_KEY]
        output = getattr(node, "workeroutput", None)
        if output:
            session.ingest_worker(output)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        config = session.config
        s = config.stash.get(SESSION_KEY, None)
        if s is not None and s.is_worker:
            config.workeroutput[WORKER_OUTPUT_KEY] = s.worker_output()  # type: ignore[attr-defined]
