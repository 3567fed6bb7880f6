"""``autotune search``: propose, write inside the modification surface, measure through the plugin.

For a kernel template (``--problem=PATH``, template from ``<suite>/templates/<problem>/``), each proposed point
becomes ``<out>/<problem>/<tuner>_s<seed>_i<NNN>.py`` (the template with its PARAMS line set to the point), and a
``manifest.json`` beside them names the study, arm, tuner, seed, template digest, space and each candidate's
iteration and digest. Then one ``pytest --autotune`` session measures them (``--candidates=<out>
--study-manifest=<manifest>``): same gates, same store, each row with its study, arm and iteration.

``--engine=NAME`` (engine flag spaces) is the seam for engine items: the search target is then an engine's flag
space, and a point an engine configuration; engines are built on their own branch and plug in here.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

from ...errors import AutotuneUsageError
from ...gates.surface import matches
from ...protocol import Protocol
from .manifest import MANIFEST_NAME, write_manifest
from .space import Template, find_template, load_template
from .tuners import Tuner


@dataclass
class SearchPlan:
    root: Path
    problem: Path
    template: Template
    tuner: Tuner
    study: str
    arm: str
    budget: int
    seed: int
    out: Path  # the --candidates folder
    first_iteration: int = 1
    fixed: dict[str, Any] = field(default_factory=dict)

    @property
    def folder(self) -> Path:
        return self.out / self.problem.stem

    @property
    def manifest_path(self) -> Path:
        return self.folder / MANIFEST_NAME


def default_out(study: str, arm: str) -> Path:
    return Path("candidates") / "search" / study / arm


def check_inside_surface(root: Path, folder: Path, protocol: Protocol) -> None:
    try:
        rel = folder.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        raise AutotuneUsageError(f"--out={folder} is outside the rootdir {root}: generated candidates must live inside "
                                 "the modification surface") from None
    probe = f"{rel}/x.py"
    if not matches(probe, protocol.surface.modifiable):
        raise AutotuneUsageError(f"--out={rel} is outside the modification surface [surface].modifiable = "
                                 f"{list(protocol.surface.modifiable)}: write generated candidates where a candidate "
                                 "author may write (default candidates/search/<study>/<arm>)")


def resolve_template(problem: Path, template: Optional[Path]) -> Template:
    return load_template(template if template is not None else find_template(problem))


def write_candidates(plan: SearchPlan, points: Sequence[dict]) -> list[dict]:
    folder = plan.folder
    if folder.exists() and any(folder.iterdir()):
        raise AutotuneUsageError(f"{folder} already holds candidates (an earlier search of this arm?): remove it, or "
                                 "choose another --out (each search writes its own folder)")
    folder.mkdir(parents=True, exist_ok=True)
    entries = []
    for k, point in enumerate(points):
        iteration = plan.first_iteration + k
        name = f"{plan.tuner.name}_s{plan.seed}_i{iteration:03d}"
        # the header names the tuner, seed and point, not the study or arm: two arms given the same tuner and seed
        # produce byte-identical candidates, which the treatment-delivery check sees (docs/guide/studies.md)
        header = f"autotune search: tuner {plan.tuner.name}, seed {plan.seed}, point {k + 1} of {len(points)}"
        text = plan.template.instantiate(point, header)
        path = folder / f"{name}.py"
        path.write_text(text)
        entries.append({"problem": plan.problem.stem, "name": name, "iteration": iteration,
                        "sha256": hashlib.sha256(text.encode()).hexdigest(), "path": path.name, "params": point})
    rel_template = _rel(plan.template.path, plan.root)
    write_manifest(plan.manifest_path, {
        "study": plan.study, "arm": plan.arm, "tuner": plan.tuner.name, "seed": plan.seed, "budget": plan.budget,
        "problem": _rel(plan.problem, plan.root), "template": rel_template, "template_sha256": plan.template.sha256,
        "space": plan.template.space.to_json(), "fixed": plan.fixed, "candidates": entries,
    })
    return entries


def _rel(p: Path, root: Path) -> str:
    try:
        return Path(p).resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return str(p)


def pytest_command(plan: SearchPlan, *, db: Path, device: str, report: Path, bundled_root: Path,
                   extra: Sequence[str] = ()) -> list[str]:
    cmd = [sys.executable, "-m", "pytest", "--autotune", f"--candidates={plan.out}",
           f"--study-manifest={plan.manifest_path}", f"--autotune-db={db}", f"--device={device}",
           f"--autotune-json={report}", "-p", "no:cacheprovider"]
    problem = plan.problem.resolve()
    if bundled_root.resolve() not in problem.parents:
        cmd.append(f"--problems={problem.parent}")
    cmd += [*extra, str(problem)]
    return cmd


def run_pytest(cmd: list[str], root: Path) -> int:
    return subprocess.run(cmd, cwd=root).returncode


def summarize(report_path: Path, entries: list[dict]) -> list[str]:
    try:
        rep = json.loads(report_path.read_text())
    except (OSError, ValueError):
        return ["(the measuring session wrote no report)"]
    by_name = {(i["problem"], i["candidate"]): i for i in rep.get("items", [])}
    lines = []
    for e in entries:
        it = by_name.get((e["problem"], e["name"]))
        if it is None:
            lines.append(f"  iteration {e['iteration']:>3} {e['name']}: not measured")
            continue
        res = (f"{it['speedup']:.3f}x [{it['ci'][0]:.3f}, {it['ci'][1]:.3f}]" if it.get("speedup") is not None
               and it["verdict"] == "accepted" else f"{it['verdict']} ({it['gate']})")
        lines.append(f"  iteration {e['iteration']:>3} {e['name']}: {res}   {json.dumps(e['params'])}")
    return lines
