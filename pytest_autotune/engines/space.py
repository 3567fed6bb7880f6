"""The flag-search seam: an engine's declared flag space, and flag assignments turned into items.

The seeded random-search tuner of the studies work (``autotune search --tuner=random --engine=...``) needs three
things from engines, and only these:

* :func:`flag_space` — the space declared in the engine's declaration file (``[space]``: flag → choices);
* :meth:`FlagSpace.sample` — one assignment drawn from a ``random.Random`` the tuner seeds (the same seed draws
  the same assignments, so a search is replayable);
* :func:`config_from_assignment` and :func:`write_search_declaration` — an assignment becomes an
  :class:`EngineConfig` named after its digest, and a declaration file that ``pytest --autotune`` collects as
  ordinary engine items (paired against the same engine's default, through every gate, recorded with the
  study, arm and iteration the tuner passes on the command line).

Nothing here measures: measuring is the engine item's job, so a tuner cannot measure in any other way.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from .adapters.base import FlagSet
from .declaration import EngineConfig, EngineDeclaration, load_declaration


@dataclass(frozen=True)
class FlagSpace:
    engine: str
    choices: Mapping[str, tuple[Any, ...]]

    def size(self) -> int:
        n = 1
        for c in self.choices.values():
            n *= len(c)
        return n

    def sample(self, rng: random.Random) -> dict[str, Any]:
        """One assignment: each declared flag gets one of its choices (flags iterated in sorted order, so the
        draw depends on the seed and the space only)."""
        return {flag: rng.choice(list(self.choices[flag])) for flag in sorted(self.choices)}

    def validate(self, assignment: Mapping[str, Any]) -> None:
        for flag, value in assignment.items():
            if flag not in self.choices:
                raise ValueError(f"--{flag} is not in {self.engine}'s declared flag space "
                                 f"({', '.join(sorted(self.choices))}); add it under [space]")
            if value not in self.choices[flag]:
                raise ValueError(f"--{flag} = {value!r} is not one of its declared choices {list(self.choices[flag])}")


def flag_space(declaration: EngineDeclaration | Path) -> FlagSpace:
    decl = declaration if isinstance(declaration, EngineDeclaration) else load_declaration(Path(declaration))
    if not decl.space:
        raise ValueError(f"{decl.path} declares no [space]: list the flags a search may set and their choices")
    return FlagSpace(decl.engine, dict(decl.space))


def assignment_digest(engine: str, assignment: Mapping[str, Any]) -> str:
    blob = json.dumps({"engine": engine, "flags": dict(sorted(assignment.items()))}, sort_keys=True,
                      separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


def config_from_assignment(declaration: EngineDeclaration, assignment: Mapping[str, Any], *,
                           name: Optional[str] = None, workloads: Optional[Sequence[str]] = None,
                           description: str = "") -> EngineConfig:
    """An assignment as a configuration of ``declaration``'s engine (validated against its flag space); named
    ``search-<12 hex of its digest>`` unless ``name`` is given."""
    space = flag_space(declaration)
    space.validate(assignment)
    wl = tuple(workloads) if workloads else tuple(declaration.workloads)
    for w in wl:
        if w not in declaration.workloads:
            raise ValueError(f"workload {w!r} is not declared in {declaration.path}")
    cname = name or f"search-{assignment_digest(declaration.engine, assignment)[:12]}"
    return EngineConfig(cname, FlagSet.of(dict(assignment)), wl, description or "drawn by a flag search")


def write_search_declaration(declaration: EngineDeclaration, configs: Sequence[EngineConfig], path: Path) -> Path:
    """Write a declaration file holding ``declaration``'s engine, model, server flags and workloads and the
    given configurations; ``pytest --autotune PATH`` measures them as items."""
    import tomli_w

    doc: dict[str, Any] = {
        "engine": declaration.engine,
        "description": f"flag-search configurations drawn from {declaration.path.name}",
        "model": _dataclass_dict(declaration.model),
        "server": {"flags": declaration.server_flags.as_dict(), "raw": list(declaration.server_flags.raw),
                   "env": dict(declaration.server_env)},
        "workloads": {name: {k: v for k, v in w.to_json().items() if k != "name"}
                      for name, w in declaration.workloads.items()},
        "configs": {c.name: {"flags": c.flags.as_dict(), "workloads": list(c.workloads),
                             **({"raw": list(c.flags.raw)} if c.flags.raw else {}),
                             **({"description": c.description} if c.description else {})} for c in configs},
        "space": {k: list(v) for k, v in declaration.space.items()},
    }
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(tomli_w.dumps(doc))
    return path


def _dataclass_dict(obj: Any) -> dict[str, Any]:
    import dataclasses

    return dataclasses.asdict(obj)
