"""Unusable iterations of a search manifest, as items (docs/guide/llm-tuner.md#unusable-iterations).

An adaptive tuner's iteration can end without anything to measure: the model's reply held no code, was cut off by
the token cap, named an engine flag outside the declared space, or the call failed. ``autotune search`` writes such
an iteration into the manifest with ``"unusable": "<why>"`` (and the reply, as received, as its file). The session
that measures that manifest collects the manifest file itself (``pytest_collect_file``: the manifest passed as
``--study-manifest`` is also a collection argument, added by :func:`add_manifest_arg`), and each unusable entry is
one item that records a refusal with gate ``reply``: a rejections row carrying the study, arm, iteration and the
reply's digest, the session's table and JSON report. So the iteration is part of its arm's trajectory, as
unusable, like any refused candidate -- never dropped.

Nothing of the reply is run: the item reads the manifest, not the reply.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Optional

import pytest

from ..keys import SESSION_KEY
from .search.manifest import ManifestEntry

if TYPE_CHECKING:  # pragma: no cover
    from ..session import AutotuneSession

#: the gate an unusable iteration is refused by
REPLY_GATE = "reply"


class UnusableIterationFailure(Exception):
    """The iteration produced nothing to measure (pytest failure)."""


def add_manifest_arg(config: pytest.Config, session: "AutotuneSession") -> None:
    """Collect the ``--study-manifest`` file when it names unusable iterations (so they are recorded even when the
    manifest is not named on the command line)."""
    m = session.studies.manifest
    if m is None or not m.unusable:
        return
    have = [Path(a.split("::")[0]).resolve() for a in config.args]
    if not any(m.path == h or h in m.path.parents for h in have):
        config.args.append(str(m.path))


def collect_manifest(file_path: Path, parent: pytest.Collector) -> Optional[pytest.Collector]:
    """The ``--study-manifest`` file, as a collector of its unusable iterations (None for any other file)."""
    session = parent.config.stash.get(SESSION_KEY, None)
    m = session.studies.manifest if session is not None else None
    if m is None or file_path.resolve() != m.path:
        return None
    return ManifestFile.from_parent(parent, path=file_path)


class ManifestFile(pytest.File):
    def collect(self) -> Iterator[pytest.Item]:
        session: AutotuneSession = self.config.stash[SESSION_KEY]
        m = session.studies.manifest
        assert m is not None
        for entry in m.unusable:
            yield UnusableIterationItem.from_parent(self, name=f"{entry.name}[{session.opts.device}]", entry=entry)


class UnusableIterationItem(pytest.Item):
    def __init__(self, *, entry: ManifestEntry, **kw: Any) -> None:
        super().__init__(**kw)
        self.entry = entry
        self.add_marker(pytest.mark.autotune)
        self.extra_keyword_matches.update({entry.problem, entry.name})

    def runtest(self) -> None:
        from ..item_run import FlowVerdict
        from ..result import ItemOutcome

        session: AutotuneSession = self.config.stash[SESSION_KEY]
        m = session.studies.manifest
        assert m is not None
        e = self.entry
        reason = f"unusable iteration {e.iteration}: {e.unusable} (the reply as received: {e.path})"
        details = {"study": {"study": m.study, "arm": m.arm, "iteration": e.iteration}, "candidate_sha256": e.sha256,
                   "reply": e.path, "tuner": m.tuner}
        session.add_verdict(FlowVerdict(ItemOutcome(
            nodeid=self.nodeid, kind=e.kind, problem=e.problem, candidate=e.name, device=session.opts.device,
            verdict="rejected", gate=REPLY_GATE, reason=reason, details=details)))
        self.user_properties += [("autotune_verdict", "rejected"), ("autotune_gate", REPLY_GATE)]
        raise UnusableIterationFailure(f"REJECTED by {REPLY_GATE}: {reason}")

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        if isinstance(excinfo.value, UnusableIterationFailure):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self) -> tuple[Path, Optional[int], str]:
        return self.path, None, f"{self.entry.problem} / {self.entry.name}: unusable iteration {self.entry.iteration}"
