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
from .problems.discovery import BUNDLED_ROOT, candidates_for, is_problem_file
from .problems.loader import LoadedProblem
from .problems.model import AA_CANDIDATE_NAME, CandidateRef, KernelItemSpec, ProblemRef, SourceFile
from .report.precision import MOST_PAIRS
from .session import AutotuneSession

pytest_plugins = ["pytest_autotune.build.prebuild", "pytest_autotune.published"]  # build pool; published numbers


def _device_choice(value: str) -> str:
    if not value or not value.replace("_", "").replace("-", "").isalnum():
        raise pytest.UsageError(f"--device={value!r}: give a device name such as cpu, cuda or mlx")
    return value


def _existing_dir(value: str) -> str:
    p = Path(value).expanduser()
    if not p.is_dir():
        import argparse

        raise argparse.ArgumentTypeError(f"{value!r} is not a directory; pass a folder of problem/candidate files")
    return value


def _iteration(value: str) -> int:
    import argparse
    try:
        v = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not an iteration number") from None
    if v < 0:
        raise argparse.ArgumentTypeError("--iteration must be >= 0")
    return v


def _size(text: str) -> int:
    import argparse

    from .measure.memory import parse_bytes

    try:
        return parse_bytes(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _k_override(value: str) -> str:
    import argparse

    from .measure.sampling import KOverride

    try:
        KOverride.parse(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return value


def _pairs(value: str) -> int:
    import argparse
    if not value.isdigit() or not 1 <= int(value) <= MOST_PAIRS:
        raise argparse.ArgumentTypeError(f"{value!r}: give a number of pairs of processes from 1 to {MOST_PAIRS}")
    return int(value)


def _seed(value: str) -> int:
    import argparse

    try:
        v = int(value, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not an integer seed") from None
    if v < 0:
        raise argparse.ArgumentTypeError("the probe seed must be >= 0")
    return v


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(hookspec)


def pytest_addoption(parser: pytest.Parser) -> None:
    g = parser.getgroup("autotune", "pytest-autotune: trustworthy kernel benchmarks")
    g.addoption("--autotune", action="store_true", default=False,
                help="time and record kernel items. Without it, items run the correctness gate and probes only "
                     "and nothing is recorded.")
    g.addoption("--device", dest="autotune_device", default="cpu", type=_device_choice, metavar="NAME",
                help="where to measure: cpu (default), cuda, mlx (the held-out retest leg), or a device "
                     "registered by the pytest_autotune_devices hook.")
    g.addoption("--autotune-db", dest="autotune_db", default=None, metavar="PATH",
                help="SQLite results store (default: .autotune/results.db under the rootdir).")
    g.addoption("--autotune-json", dest="autotune_json", default=None, metavar="PATH",
                help="write the JSON report (schema pytest-autotune/report/1) to PATH.")
    g.addoption("--problems", dest="autotune_problems", action="append", default=[], type=_existing_dir,
                metavar="DIR", help="also collect KernelBench-format problem files from DIR (repeatable).")
    g.addoption("--candidates", dest="autotune_candidates", action="append", default=[], type=_existing_dir,
                metavar="DIR", help="also collect candidates laid out as DIR/<problem_stem>/<name>.py (repeatable).")
    g.addoption("--autotune-exploratory", dest="autotune_exploratory", action="store_true", default=False,
                help="allow an unfrozen protocol.toml; every row is then marked exploratory.")
    g.addoption("--autotune-aa", dest="autotune_aa", action="store_true", default=False,
                help="add an A/A item per problem (the reference against itself: must read ~1.0x).")
    g.addoption("--autotune-base", dest="autotune_base", default=None, metavar="REF",
                help="check with git that every change since REF is inside [surface].modifiable of the protocol; "
                     "otherwise refuse to record and name the files.")
    g.addoption("--autotune-probe-seed", dest="autotune_probe_seed", default=None, type=_seed, metavar="N",
                help="replay the hypothesis cheat probes with this seed (printed when a probe fails).")
    g.addoption("--autotune-k", dest="autotune_k", default=None, type=_k_override, metavar="K",
                help="time every sample with K calls (a number, or xF: F times the protocol's choice) instead of the "
                     "protocol's k, for harness benchmarks (benchmarks/harness/k_invariance.py); needs "
                     "--autotune-exploratory, and every row is then marked exploratory.")
    g.addoption("--autotune-pairs", dest="autotune_pairs", default=None, type=_pairs, metavar="N",
                help="time every item in N pairs of processes, each with the protocol's budget of one pair "
                     "([timing].item_budget_s / [timing].process_pairs): more pairs narrow the CI, at that many "
                     "times the timing (docs/guide/precision.md). Recorded in the run's provenance.")
    g.addoption("--autotune-max-pairs", dest="autotune_max_pairs", default=None, type=_pairs, metavar="N",
                help="add pairs of processes to every item, each timed as --autotune-pairs times one, until its CI "
                     "reaches the protocol's target ([statistics].ci_target_rel_width), at most N: items that "
                     "scatter little stop early (docs/guide/precision.md#until-the-target-autotune-max-pairsn). Recorded in the "
                     "run's provenance.")
    g.addoption("--autotune-device-memory", dest="autotune_device_memory", default=None, type=_size, metavar="SIZE",
                help="plan every item's device memory with at most SIZE (e.g. 40GiB), whatever else is free: share a "
                     "GPU with other work, or give the CPU a device memory so that memory planning can be tried "
                     "there (docs/architecture.md#memory-planned-per-device).")
    # studies (docs/guide/studies.md)
    g.addoption("--study", dest="autotune_study", default=None, metavar="NAME",
                help="attach every item's result or refusal to study NAME (with --arm, and --iteration).")
    g.addoption("--arm", dest="autotune_arm", default=None, metavar="NAME", help="the study arm of these items.")
    g.addoption("--iteration", dest="autotune_iteration", default=None, type=_iteration, metavar="K",
                help="the iteration of the arm these items are (an agent's K-th attempt).")
    g.addoption("--study-registry", dest="autotune_study_registry", default=None, metavar="PATH",
                help="the study registry, relative to the rootdir (default: studies.toml).")
    g.addoption("--study-manifest", dest="autotune_study_manifest", default=None, metavar="PATH",
                help="the manifest autotune search wrote: study, arm and each generated candidate's iteration; "
                     "other candidates are deselected.")
    g.addoption("--autotune-remeasure", dest="autotune_remeasure", default=None, metavar="RUN_ID",
                help="re-time the accepted results of RUN_ID: each new result is linked to the row it re-measures; "
                     "other items are deselected (autotune remeasure runs this).")
    g.addoption("--autotune-plots", dest="autotune_plots", default=None, metavar="DIR",
                help="write PNG plots of the session to DIR (speedups with CI, A/A, transfer ratios, study "
                     "trajectories).")
    from .ci.options import add_options as add_ci_options

    add_ci_options(g)  # --autotune-compare, --autotune-fail-on, --autotune-fail-margin, --autotune-md (docs/guide/ci.md)


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
