"""Search spaces declared by candidate templates.

A template is a candidate file (``class ModelNew``) with two extra module-level literals::

    AUTOTUNE_SEARCH_SPACE = {"algorithm": ["library", "two_pass"], "block_rows": [0, 8, 32]}
    PARAMS = {"algorithm": "library", "block_rows": 0}    # one point; autotune search rewrites this line

Both are read with :func:`ast.literal_eval` (the template is never imported here), and a generated candidate is
the template with the ``PARAMS`` assignment replaced by one point, so every point is a distinct file with its own
digest and the code that runs is the template's own. Templates live in ``<suite>/templates/<problem>/``.
"""

from __future__ import annotations

import ast
import hashlib
import itertools
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from ...errors import AutotuneUsageError
from ...result import canonical_json

SPACE_NAME = "AUTOTUNE_SEARCH_SPACE"
PARAMS_NAME = "PARAMS"
TEMPLATES_DIR = "templates"

Point = dict[str, Any]
_SCALARS = (str, int, float, bool, type(None))


@dataclass(frozen=True)
class SearchSpace:
    """An ordered product of named value lists."""

    dims: tuple[tuple[str, tuple[Any, ...]], ...]

    @property
    def size(self) -> int:
        n = 1
        for _, values in self.dims:
            n *= len(values)
        return n

    def to_json(self) -> dict:
        return {k: list(v) for k, v in self.dims}

    def digest(self) -> str:
        return hashlib.sha256(canonical_json(self.to_json()).encode()).hexdigest()

    def contains(self, point: Mapping[str, Any]) -> bool:
        return set(point) == {k for k, _ in self.dims} and all(
            any(_same(point[k], v) for v in values) for k, values in self.dims)

    def point(self, index: int) -> Point:
        """The ``index``-th point in mixed-radix order (the last dimension varies fastest)."""
        if not 0 <= index < self.size:
            raise IndexError(index)
        out: Point = {}
        for k, values in reversed(self.dims):
            index, r = divmod(index, len(values))
            out[k] = values[r]
        return {k: out[k] for k, _ in self.dims}

    def points(self) -> list[Point]:
        keys = [k for k, _ in self.dims]
        return [dict(zip(keys, combo)) for combo in itertools.product(*(v for _, v in self.dims))]

    def sample(self, n: int, seed: int) -> list[Point]:
        """``n`` distinct points drawn uniformly without replacement; the same seed and space give the same
        points in the same order."""
        if n < 1:
            raise AutotuneUsageError("--budget must be at least 1")
        if n > self.size:
            raise AutotuneUsageError(f"--budget={n} exceeds the search space ({self.size} points): lower the budget "
                                     f"to at most {self.size} (every point once), or widen the space")
        rng = random.Random(f"pytest-autotune random search|{seed}|{self.digest()}")
        return [self.point(i) for i in rng.sample(range(self.size), n)]

    def restricted(self, fixed: Mapping[str, Any]) -> "SearchSpace":
        """The space with some dimensions pinned (``--fix KEY=VALUE``)."""
        keys = {k for k, _ in self.dims}
        unknown = sorted(set(fixed) - keys)
        if unknown:
            raise AutotuneUsageError(f"--fix {unknown[0]}=...: the space has no dimension {unknown[0]!r} "
                                     f"(it has {', '.join(sorted(keys))})")
        dims = []
        for k, values in self.dims:
            if k in fixed:
                keep = tuple(v for v in values if _same(v, fixed[k]))
                if not keep:
                    raise AutotuneUsageError(f"--fix {k}={fixed[k]!r}: not one of the space's values {list(values)}")
                dims.append((k, keep))
            else:
                dims.append((k, values))
        return SearchSpace(tuple(dims))


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b


def parse_fix(items: Sequence[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise AutotuneUsageError(f"--fix {item!r}: write KEY=VALUE, e.g. --fix algorithm='library' or --fix block_rows=16")
        try:
            value = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            value = raw
        out[key.strip()] = value
    return out


@dataclass(frozen=True)
class Template:
    path: Path
    source: str
    sha256: str
    space: SearchSpace
    default: Point
    params_lines: tuple[int, int]  # 1-based first line, last line of the PARAMS assignment

    def instantiate(self, point: Mapping[str, Any], header: str) -> str:
        if not self.space.contains(point):
            raise AutotuneUsageError(f"{dict(point)} is not a point of {self.path}'s search space")
        lines = self.source.splitlines(keepends=True)
        first, last = self.params_lines
        literal = "{" + ", ".join(f"{k!r}: {point[k]!r}" for k, _ in self.space.dims) + "}"
        new = f"{PARAMS_NAME} = {literal}  # {header}\n"
        return "".join(lines[: first - 1]) + new + "".join(lines[last:])


def _literal(node: ast.AST, path: Path, name: str) -> Any:
    try:
        return ast.literal_eval(node)
    except (ValueError, SyntaxError):
        raise AutotuneUsageError(f"{path}: {name} must be a literal (dicts, lists, strings, numbers) so it can be "
                                 "read without running the template") from None


def load_template(path: Path) -> Template:
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise AutotuneUsageError(f"cannot read template {path}: {e.strerror}") from None
    source = data.decode("utf-8")
    try:
        tree = ast.parse(source, str(path))
    except SyntaxError as e:
        raise AutotuneUsageError(f"{path}: syntax error at line {e.lineno}: {e.msg}") from None
    found: dict[str, ast.Assign] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            if name in (SPACE_NAME, PARAMS_NAME):
                if name in found:
                    raise AutotuneUsageError(f"{path}: {name} is assigned twice; keep one assignment")
                found[name] = node
    for name in (SPACE_NAME, PARAMS_NAME):
        if name not in found:
            raise AutotuneUsageError(f"{path} is not a search template: it has no module-level {name} = {{...}} "
                                     "(docs/guide/studies.md, \"Search templates\")")
    raw_space = _literal(found[SPACE_NAME].value, path, SPACE_NAME)
    if not isinstance(raw_space, dict) or not raw_space:
        raise AutotuneUsageError(f"{path}: {SPACE_NAME} must be a non-empty dict of name -> list of values")
    dims = []
    for k, values in raw_space.items():
        if not isinstance(k, str) or not k.isidentifier():
            raise AutotuneUsageError(f"{path}: {SPACE_NAME} key {k!r} must be an identifier")
        if not isinstance(values, (list, tuple)) or not values or not all(isinstance(v, _SCALARS) for v in values):
            raise AutotuneUsageError(f"{path}: {SPACE_NAME}[{k!r}] must be a non-empty list of strings, numbers, "
                                     "booleans or None")
        if len({canonical_json(v) for v in values}) != len(values):
            raise AutotuneUsageError(f"{path}: {SPACE_NAME}[{k!r}] lists a value twice")
        dims.append((k, tuple(values)))
    space = SearchSpace(tuple(dims))
    default = _literal(found[PARAMS_NAME].value, path, PARAMS_NAME)
    if not isinstance(default, dict) or not space.contains(default):
        raise AutotuneUsageError(f"{path}: {PARAMS_NAME} must be one point of {SPACE_NAME} (every key, each value "
                                 "one of the listed ones)")
    node = found[PARAMS_NAME]
    return Template(path, source, hashlib.sha256(data).hexdigest(), space, default,
                    (node.lineno, node.end_lineno or node.lineno))


def find_template(problem: Path, name: Optional[str] = None) -> Path:
    """``<suite>/templates/<problem stem>/<name>.py``; the only one there when no name is given."""
    folder = problem.parent / TEMPLATES_DIR / problem.stem
    found = sorted(p for p in folder.glob("*.py") if not p.name.startswith("_")) if folder.is_dir() else []
    if name:
        found = [p for p in found if p.stem == name]
    if len(found) == 1:
        return found[0]
    if not found:
        raise AutotuneUsageError(f"no search template for {problem.name}: write one as {folder}/<name>.py "
                                 "(docs/guide/studies.md) or pass --template=PATH")
    raise AutotuneUsageError(f"{folder} holds {len(found)} templates ({', '.join(p.stem for p in found)}): "
                             "choose one with --template=PATH")
