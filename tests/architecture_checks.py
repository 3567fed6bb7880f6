"""Static checks of the package's shape (docs/architecture.md#modules-one-job-each): module sizes and import
cycles, read from the source with ``ast`` -- nothing is imported, so the checks see imports inside functions too.

An import counts wherever it is written (module level, inside a function, inside ``try``), except under
``if TYPE_CHECKING:``, which never runs. ``from . import x`` counts as an import of the submodule ``x`` when there
is one; ``from .a import b`` counts as ``a.b`` when ``b`` is a submodule, else as ``a``. Only imports of modules of
the package itself are edges; a parent package's ``__init__`` is not counted as imported by ``import a.b``.
Imports by name at run time (``importlib.import_module``, a device's ``"module:Class"`` target, ``python -m``
in a subprocess) are not statements and are not edges.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path


def module_name(package_dir: Path, path: Path) -> str:
    """``pytest_autotune/a/b.py`` -> ``pytest_autotune.a.b``; a package's ``__init__.py`` -> the package."""
    rel = path.relative_to(package_dir.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def module_files(package_dir: Path) -> dict[str, Path]:
    """Every module of the package by dotted name."""
    return {module_name(package_dir, p): p for p in sorted(package_dir.rglob("*.py"))}


def module_sizes(package_dir: Path) -> dict[str, int]:
    """Lines per module, by dotted name."""
    return {name: len(path.read_text(encoding="utf-8").splitlines())
            for name, path in module_files(package_dir).items()}


def _is_type_checking(test: ast.expr) -> bool:
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


def _runtime_imports(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Import statements under ``node`` that can run: everything but the body of ``if TYPE_CHECKING:``."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            for other in child.orelse:
                if isinstance(other, (ast.Import, ast.ImportFrom)):
                    yield other
                yield from _runtime_imports(other)
            continue
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            yield child
        yield from _runtime_imports(child)


def _base_package(name: str, is_package: bool, level: int) -> str:
    """The package a relative import of ``level`` dots resolves against."""
    parts = name.split(".")
    if not is_package:
        parts = parts[:-1]
    if level > 1:
        parts = parts[: len(parts) - (level - 1)]
    return ".".join(parts)


def imports_of(name: str, path: Path, modules: set[str]) -> set[str]:
    """The package's modules that module ``name`` imports (at run time, at any depth of its code)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for stmt in _runtime_imports(tree):
        if isinstance(stmt, ast.Import):
            for alias in stmt.names:
                if alias.name in modules:
                    found.add(alias.name)
            continue
        if stmt.level:
            base = _base_package(name, is_package, stmt.level)
            target = f"{base}.{stmt.module}" if stmt.module else base
        else:
            target = stmt.module or ""
        for alias in stmt.names:
            sub = f"{target}.{alias.name}"
            if sub in modules:
                found.add(sub)
            elif target in modules:
                found.add(target)
    found.discard(name)
    return found


def import_graph(package_dir: Path) -> dict[str, set[str]]:
    """Module -> the package's modules it imports."""
    files = module_files(package_dir)
    names = set(files)
    return {name: imports_of(name, path, names) for name, path in files.items()}


def _strong_components(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative (the graph has a few hundred nodes; recursion would do, but needn't)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            advanced = False
            for succ in successors:
                if succ not in index:
                    index[succ] = low[succ] = counter
                    counter += 1
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(sorted(graph.get(succ, ())))))
                    advanced = True
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                components.append(sorted(component))
    return components


def find_cycles(package_dir: Path) -> list[list[str]]:
    """Each group of modules that import one another in a cycle (a strongly connected component of more than one
    module), sorted; empty when the import graph is acyclic."""
    graph = import_graph(package_dir)
    return sorted(c for c in _strong_components(graph) if len(c) > 1)


def example_cycle(package_dir: Path, component: list[str]) -> list[str]:
    """One concrete cycle through ``component``'s first module, ``[a, b, ..., a]``, for an error message."""
    graph = import_graph(package_dir)
    members = set(component)
    start = component[0]
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following: list[str] = []
        for node in frontier:
            for succ in sorted(graph[node] & members):
                if succ == start:
                    chain: list[str] = []
                    back = node
                    while back != start:
                        chain.append(back)
                        back = previous[back]
                    return [start, *reversed(chain), start]
                if succ not in previous:
                    previous[succ] = node
                    following.append(succ)
        frontier = following
    return component
