"""The CI comparison's pytest hooks (docs/guide/ci.md).

The stored run is loaded and checked in ``pytest_autotune_session_start`` (before the controller begins its run,
so a refused comparison records nothing); the controller hands it to xdist workers. Each kernel item is compared
when its call report is made (in the process that measured it): a regression under
``--autotune-fail-on=regression`` turns the passed report into a failure naming both speedups and CIs, and every
compared item carries the stored numbers and the outcome as junitxml properties. At the end the controller compares
the whole session (missing items included) for the terminal, the Markdown summary and the JSON report.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generator, Optional

import pytest

from ..errors import AutotuneUsageError
from ..keys import SESSION_KEY, VERDICT_KEY
from ..problems.discovery import CPU_SUBDIR, CUDA_SUBDIR, MLX_SUBDIR
from .compare import ItemComparison, compare_item, compare_session, counts, rule_text
from .options import CIOptions
from .stored import StoredRun, check_compatible, load_stored

if TYPE_CHECKING:  # pragma: no cover
    from ..result import ItemOutcome
    from ..session import AutotuneSession

WORKER_INPUT_KEY = "pytest_autotune_ci"


class CIPlugin:
    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.opts = CIOptions.from_config(config)
        self.stored: Optional[StoredRun] = None
        #: --autotune-changed-only: the (problem, candidate) of every candidate file changed since --autotune-base
        self.changed: Optional[frozenset[tuple[str, str]]] = None

    # ------------------------------------------------------------------------------------------- start
    def pytest_autotune_session_start(self, session: "AutotuneSession") -> None:
        o = self.opts
        if o.changed_only:
            self._changed(session)
        if o.fail_on and not o.compare:
            raise AutotuneUsageError("--autotune-fail-on=regression needs a stored run: add --autotune-compare="
                                     "RUN_ID|latest|PATH.json")
        if not o.compare:
            return
        if not session.opts.measuring:
            raise AutotuneUsageError("--autotune-compare compares measured speedups: add --autotune")
        if session.is_worker:
            self.stored = StoredRun.from_report(self.config.workerinput[WORKER_INPUT_KEY]["stored"],  # type: ignore[attr-defined]
                                                "the controller's stored run")
            return
        stored = load_stored(o.compare, store=None, db=session.opts.db, device=session.opts.device, exclude=None,
                             cwd=Path(self.config.invocation_params.dir))
        import torch

        check_compatible(stored, protocol_sha256=session.protocol.sha256, protocol_version=session.protocol.version,
                         device=session.opts.device, fingerprint=session.device.fingerprint(),
                         torch_version=torch.__version__)
        self.stored = stored

    def _changed(self, session: "AutotuneSession") -> None:
        if not session.opts.base:
            raise AutotuneUsageError("--autotune-changed-only selects the candidates changed since a base: add "
                                     "--autotune-base=REF (e.g. origin/main)")
        if session.is_worker:
            changed = self.config.workerinput[WORKER_INPUT_KEY]["changed"]  # type: ignore[attr-defined]
        else:
            changed = list((session.surface or {}).get("changed") or [])
        self.changed = changed_keys(changed)

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, session: pytest.Session, config: pytest.Config, items: list) -> None:
        if self.changed is None:
            return
        keep, drop = [], []
        for item in items:
            spec = getattr(item, "spec", None)
            if spec is None or (spec.problem.name, spec.candidate.name) in self.changed:
                keep.append(item)
            else:
                drop.append(item)
        if drop:
            config.hook.pytest_deselected(items=drop)
            items[:] = keep

    # ------------------------------------------------------------------------------------------- items
    def _compare(self, outcome: "ItemOutcome") -> Optional[ItemComparison]:
        if self.stored is None:
            return None
        key = (outcome.problem, outcome.candidate, outcome.device)
        return compare_item(outcome, self.stored.items.get(key), self.opts.margin, self.stored.run_id)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: Any) -> Generator[None, Any, Any]:
        rep = yield
        verdict = item.stash.get(VERDICT_KEY, None)
        if verdict is None or self.stored is None or not (rep.when == "call" or (rep.when == "setup" and rep.failed)):
            return rep
        cmp = self._compare(verdict.outcome)
        assert cmp is not None
        props: list[tuple[str, object]] = [("autotune_compare", cmp.outcome),
                                           ("autotune_stored_run", self.stored.run_id)]
        if cmp.old is not None:
            props += [("stored_speedup", f"{cmp.old.speedup:.4f}"), ("stored_ci_low", f"{cmp.old.ci_low:.4f}"),
                      ("stored_ci_high", f"{cmp.old.ci_high:.4f}")]
        item.user_properties.extend(props)  # junitxml reads the teardown report's copy
        rep.user_properties.extend(props)
        if cmp.fails and self.opts.fail_on == "regression" and rep.passed:
            rep.outcome = "failed"
            rep.longrepr = cmp.message
        elif cmp.outcome in ("refused", "error") and isinstance(rep.longrepr, str):
            rep.longrepr = f"{rep.longrepr}\n{cmp.message}"
        return rep

    # ------------------------------------------------------------------------------------------- end
    def _session(self) -> Optional["AutotuneSession"]:
        s = self.config.stash.get(SESSION_KEY, None)
        return None if s is None or s.is_worker else s

    def comparisons(self, outcomes: "tuple[ItemOutcome, ...] | list[ItemOutcome]") -> Optional[list[ItemComparison]]:
        if self.stored is None:
            return None
        return compare_session(outcomes, self.stored, self.opts.margin, self.changed)

    def pytest_autotune_report_sections(self, config: pytest.Config, outcomes: "tuple[ItemOutcome, ...]") -> dict:
        cmps = self.comparisons(outcomes)
        if cmps is None or self.stored is None:
            return {}
        s = self.stored
        return {"compare": {
            "stored": {"run_id": s.run_id, "source": s.source, "protocol_sha256": s.protocol_sha256,
                       "protocol_version": s.protocol_version, "device": s.device, "torch_version": s.torch_version},
            "rule": rule_text(self.opts.margin), "margin": self.opts.margin, "fail_on": self.opts.fail_on,
            "counts": counts(cmps), "items": [c.to_json() for c in cmps]}}

    def pytest_terminal_summary(self, terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
        session = self._session()
        cmps = self.comparisons(session.outcomes) if session is not None else None
        if cmps is None or self.stored is None:
            return
        tr = terminalreporter
        tr.write_sep("-", "autotune compare")
        c = counts(cmps)
        tr.write_line(f"stored {self.stored.describe()}; rule: regression when {rule_text(self.opts.margin)}"
                      + ("" if self.opts.fail_on else " (reported only; --autotune-fail-on=regression gates)"))
        tr.write_line("  " + ", ".join(f"{k}: {v}" for k, v in sorted(c.items())))
        shown = [x for x in cmps if x.outcome in ("regression", "refused", "error", "new", "missing", "improved")]
        for x in shown[:30]:
            tr.write_line(f"  {x.outcome:<10} {x.problem}/{x.candidate}[{x.device}]: {x.message[:300]}")
        if len(shown) > 30:
            tr.write_line(f"  (+{len(shown) - 30} more: see the JSON report's compare section)")

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        s = self._session()
        if s is None:
            return
        targets = [p for p in (self.opts.md,) if p is not None]
        summary = os.environ.get("GITHUB_STEP_SUMMARY")
        if summary and (s.opts.measuring or self.opts.md is not None) and s.outcomes:
            targets.append(Path(summary))
        if not targets:
            return
        from .markdown import render

        text = render(s.outcomes, self.comparisons(s.outcomes), self.stored, self.opts.margin,
                      self.opts.fail_on == "regression", s.run_id, s.opts.device)
        for i, path in enumerate(targets):
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                with open(path, "w" if i == 0 and path == self.opts.md else "a", encoding="utf-8") as f:
                    f.write(text)
            except OSError as e:
                s.store_errors.append(f"writing the Markdown summary to {path} failed: {e}")


class CIXdistHooks:
    """Registered only with pytest-xdist: hands the stored run to each worker."""

    def __init__(self, plugin: CIPlugin) -> None:
        self.plugin = plugin

    def pytest_configure_node(self, node: Any) -> None:
        p = self.plugin
        node.workerinput[WORKER_INPUT_KEY] = {"stored": p.stored.to_json() if p.stored is not None else None,
                                              "changed": [f"{a}/{b}.py" for a, b in sorted(p.changed or ())]}


#: folders of candidates for one device or framework, one level below the problem's (problems/discovery.py)
DEVICE_SUBDIRS = (MLX_SUBDIR, CUDA_SUBDIR, CPU_SUBDIR)


def changed_keys(paths: "list[str]") -> frozenset[tuple[str, str]]:
    """(problem, candidate) of each changed candidate file, laid out as ``<problem>/<name>.py`` (MLX ports:
    ``<problem>/mlx/<name>.py``; for one device only: ``<problem>/cuda/<name>.py``, ``<problem>/cpu/<name>.py``) under
    a suite's ``candidates/`` or a ``--candidates`` folder."""
    out = set()
    for p in paths:
        path = Path(p)
        if path.suffix != ".py":
            continue
        parent = path.parent.parent if path.parent.name in DEVICE_SUBDIRS else path.parent
        out.add((parent.name, path.stem))
    return frozenset(out)


def register(config: pytest.Config) -> None:
    """Called by the plugin's pytest_configure before the session is made."""
    plugin = CIPlugin(config)
    config.pluginmanager.register(plugin, "autotune-ci")
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(CIXdistHooks(plugin), "autotune-ci-xdist")
