"""Which collected items a session keeps, for studies (docs/guide/studies.md, docs/guide/anchors.md):

* anchor items (an ``anchors.toml`` entry names their problem and candidate) get the ``anchor`` marker and run
  only when asked: ``-m`` mentions ``anchor``, or the anchor's file or folder is named on the command line. They
  re-measure published numbers at published shapes, which is not the main job's business.
* with ``--study-manifest``, only the candidates (kernel or engine) the manifest lists (one search's
  iterations);
* with ``--autotune-remeasure``, only the node ids named on the command line (``autotune remeasure`` names the
  run's accepted items; ``--problems=DIR`` would otherwise add every problem of DIR).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from ..problems.model import KernelItemSpec

if TYPE_CHECKING:  # pragma: no cover
    from ..session import AutotuneSession


def _named(config: pytest.Config) -> tuple[set[str], list[Path]]:
    if getattr(config, "args_source", None) != pytest.Config.ArgsSource.ARGS:
        return set(), []
    nodeids = {a for a in config.args if "::" in a}
    paths = []
    for a in config.args:
        p = Path(a.split("::", 1)[0])
        paths.append((Path(config.invocation_params.dir) / p).resolve() if not p.is_absolute() else p.resolve())
    return nodeids, paths


def select_items(session: "AutotuneSession", items: list, config: pytest.Config) -> tuple[list, list]:
    markexpr = str(config.getoption("markexpr", "") or "")
    anchors_asked = "anchor" in markexpr
    nodeids, paths = _named(config)
    keep: list[Any] = []
    drop: list[Any] = []
    for item in items:
        spec = getattr(item, "spec", None)
        if not isinstance(spec, KernelItemSpec):  # not a kernel item (engine items, plain tests)
            engine_config = getattr(spec, "config", None)
            if (isinstance(getattr(spec, "problem", None), str) and engine_config is not None
                    and not session.studies.in_manifest_names(getattr(spec, "problem"), engine_config.name)):
                drop.append(item)  # an engine item that a search manifest does not list
            else:
                keep.append(item)
            continue
        if session.studies.anchor_for(spec) is not None:
            item.add_marker(pytest.mark.anchor)
            here = Path(item.path).resolve()
            named = any(p == here or p == here.parent for p in paths)
            if not (anchors_asked or named):
                drop.append(item)
                continue
        if not session.studies.in_manifest(spec):
            drop.append(item)
            continue
        if session.opts.remeasure and nodeids and item.nodeid not in nodeids:
            drop.append(item)
            continue
        keep.append(item)
    return keep, drop
