"""Engine items in pytest: collection of declaration files, the item, the session-end engine table.

Registered by ``pytest_autotune.plugin`` (one line in its ``pytest_configure``). Every (configuration ×
workload) of a declaration file (``benchmarks/engines/<engine>.toml``, or any declaration file named on the
command line) is an :class:`EngineItem` whose node id reads ``benchmarks/engines/vllm.toml::max-num-seqs-4[short]``;
``-k vllm`` selects an engine's items. Like a kernel item, the measurement runs in ``setup`` (a server that
cannot start is a pytest *error*), and ``runtest`` turns a refusal into a *failure* that names the gate.
Rows go through the session (:meth:`AutotuneSession.add_verdict`): MACs, hash chains, rejections, xdist, as for
kernels. Engine items hold the device's timing lock exclusively for their whole duration, so nothing else is
timed on the machine while a server runs.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Optional

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

import pytest

from ..errors import AutotuneWarning
from ..keys import SESSION_KEY
from ..session import AutotuneSession

if TYPE_CHECKING:  # pragma: no cover - loaded with the first engine file (httpx, tokenizers), not with pytest
    from .declaration import EngineConfig, EngineDeclaration

ENGINES_ROOT = Path("benchmarks") / "engines"
_VERDICT_KEY = pytest.StashKey["Any"]()
_ADAPTERS_KEY = pytest.StashKey["dict"]()
log = logging.getLogger("pytest_autotune.engines")


class EngineFailure(Exception):
    """A gate refused the engine configuration (pytest failure)."""


class EngineItemError(Exception):
    """The item could not be measured (a server that did not start, the default failing requests)."""


def adapters(config: pytest.Config) -> dict:
    """name -> adapter, from every ``pytest_autotune_engines`` implementation (first registration wins)."""
    cached = config.stash.get(_ADAPTERS_KEY, None)
    if cached is not None:
        return cached
    out: dict = {}
    for group in config.hook.pytest_autotune_engines(config=config):
        for a in group or []:
            out.setdefault(a.name, a)
    config.stash[_ADAPTERS_KEY] = out
    return out


class EnginePlugin:
    """The engine parts of pytest-autotune, as one registered plugin object."""

    def pytest_configure(self, config: pytest.Config) -> None:
        config.addinivalue_line("markers", "autotune_engine: a serving-engine item collected by pytest-autotune")

    def pytest_collect_file(self, file_path: Path, parent: pytest.Collector) -> Optional[pytest.Collector]:
        if file_path.suffix != ".toml" or file_path.name in ("protocol.toml", "pyproject.toml"):
            return None
        root = Path(parent.config.rootpath) / ENGINES_ROOT
        under_root = root == file_path.parent or root in file_path.parents
        if not under_root and not parent.session.isinitpath(file_path):
            return None
        try:
            data: Optional[dict] = tomllib.loads(file_path.read_text())
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
            data = None  # collected: the item says what is wrong with the file
        from .declaration import is_declaration

        if data is not None and not is_declaration(data) and not (under_root and "engine" in data):
            return None
        return EngineDeclarationFile.from_parent(parent, path=file_path)

    @pytest.hookimpl(trylast=True)
    def pytest_terminal_summary(self, terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
        session = config.stash.get(SESSION_KEY, None)
        if session is None or session.is_worker:
            return
        from .report import write_engine_summary

        write_engine_summary(terminalreporter, session.outcomes)

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        from .server import live_servers

        for s in live_servers():  # never happens unless an item's own cleanup was bypassed
            s.stop()


class EngineDeclarationFile(pytest.File):
    def collect(self) -> Iterator[pytest.Item]:
        from .declaration import DeclarationError, load_declaration

        session: AutotuneSession = self.config.stash[SESSION_KEY]
        try:
            decl = load_declaration(self.path)
        except (DeclarationError, OSError) as e:
            yield BrokenDeclarationItem.from_parent(self, name="declaration", reason=str(e))
            return
        if session.opts.aa:  # --autotune-aa: the default against itself, per workload
            for wname in decl.workloads:
                cfg = decl.aa_config(wname)
                yield EngineItem.from_parent(self, name=f"{cfg.name}[{wname}]", declaration=decl,
                                             engine_config=cfg, workload_name=wname, device=session.opts.device)
        for cfg in decl.configs.values():
            for wname in cfg.workloads:
                yield EngineItem.from_parent(self, name=f"{cfg.name}[{wname}]", declaration=decl,
                                             engine_config=cfg, workload_name=wname, device=session.opts.device)


class EngineItem(pytest.Item):
    def __init__(self, *, declaration: "EngineDeclaration", engine_config: "EngineConfig", workload_name: str,
                 device: str, **kw: Any) -> None:
        super().__init__(**kw)
        from .run import EngineItemSpec

        self.spec = EngineItemSpec(nodeid=self.nodeid, declaration=declaration, config=engine_config,
                                   workload=declaration.workloads[workload_name], device=device)
        self.add_marker(pytest.mark.autotune_engine)
        self.extra_keyword_matches.update({declaration.engine, engine_config.name, workload_name})

    def setup(self) -> None:
        from ..measure.lock import DeviceLock
        from .run import EngineUnavailable

        session: AutotuneSession = self.config.stash[SESSION_KEY]
        runner = _runner(self.config, session, self)
        try:
            with DeviceLock(session.device.lock_key).exclusive():
                verdict = runner.run(self.spec)
        except EngineUnavailable as e:
            pytest.skip(str(e))
        # --study/--arm/--iteration or a search manifest (docs/guide/studies.md): the rows carry the study columns
        spec, decl = self.spec, self.spec.declaration
        verdict = session.studies.attach_tag(verdict, session.studies.tag_for_names(spec.problem, spec.config.name),
                                             decl.arm_digest(decl.flags_of(spec.config)))
        self.stash[_VERDICT_KEY] = verdict
        session.add_verdict(verdict)
        o = verdict.outcome
        self.user_properties.append(("autotune_verdict", o.verdict))
        if o.gate:
            self.user_properties.append(("autotune_gate", o.gate))
        if o.measurement is not None:
            m = o.measurement
            self.user_properties += [("speedup", f"{m.speedup:.4f}"), ("ci_low", f"{m.ci_low:.4f}"),
                                     ("ci_high", f"{m.ci_high:.4f}"), ("n_pairs", str(m.n_pairs))]
        if o.verdict == "error":
            raise EngineItemError(f"ERROR ({o.gate}): {o.reason}")

    def runtest(self) -> None:
        import warnings


        o = self.stash[_VERDICT_KEY].outcome
        for w in o.warnings:
            warnings.warn(AutotuneWarning(f"{self.spec.engine}/{self.spec.config.name}: {w}"), stacklevel=1)
        expected = self.spec.config.expect_refusal
        if expected is not None:
            if o.verdict == "rejected" and o.gate == expected:
                pytest.xfail(f"refused by {o.gate}, as declared (expect = \"refused:{expected}\"): {o.reason}")
            if o.verdict == "accepted":
                raise EngineFailure(f"declared expect = \"refused:{expected}\", but the {expected} gate accepted "
                                    "this configuration")
        if o.verdict == "quarantined":
            raise EngineFailure(o.reason)
        if o.verdict == "rejected":
            raise EngineFailure(f"REJECTED by {o.gate}: {o.reason}")

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        if isinstance(excinfo.value, (EngineFailure, EngineItemError)):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self) -> tuple[Path, Optional[int], str]:
        return self.path, None, f"{self.spec.engine} {self.spec.config.name} on {self.spec.workload.name}"


class BrokenDeclarationItem(pytest.Item):
    def __init__(self, *, reason: str, **kw: Any) -> None:
        super().__init__(**kw)
        self.reason = reason

    def runtest(self) -> None:
        raise EngineFailure(f"unusable engine declaration: {self.reason}")

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        if isinstance(excinfo.value, EngineFailure):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self) -> tuple[Path, Optional[int], str]:
        return self.path, None, f"{self.path.name}: unusable engine declaration"


def _runner(config: pytest.Config, session: AutotuneSession, item: EngineItem):
    from ..provenance import collect
    from .install import cache_root
    from .run import EngineEnv, EngineRunner

    keys = [k for group in config.hook.pytest_autotune_provenance_keys(config=config) for k in group]
    tr = config.pluginmanager.get_plugin("terminalreporter")
    label = f"{item.spec.engine} {item.spec.config.name}[{item.spec.workload.name}]"

    capman = config.pluginmanager.getplugin("capturemanager")

    def progress(text: str) -> None:
        log.info("%s: %s", label, text)
        if tr is None or config.getoption("verbose", 0) < 0:
            return
        # output capture is on during setup (it would hold these lines until the item ends): step around it, as
        # live logging does, so each launch and window shows as it happens
        with capman.global_and_fixture_disabled() if capman is not None else contextlib.nullcontext():
            tr.write_line(f"  [{label}] {text}")
            tr.flush()

    store_dir = session.opts.db.parent if session.opts.db else Path(config.rootpath) / ".autotune"
    env = EngineEnv(
        protocol=session.protocol, adapters=adapters(config), nonce=session.nonce, run_id=session.run_id,
        exploratory=session.exploratory, measuring=session.opts.measuring,
        log_dir=store_dir / "engine-logs" / session.run_id, model_dir=cache_root() / "models", progress=progress,
        release_lookup=session.release_for, item_provenance=lambda facts: collect(keys, "item", facts),
    )
    return EngineRunner(env)


PLUGIN = EnginePlugin()
