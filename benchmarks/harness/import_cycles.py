"""Import cycles inside a Python package, counting imports inside functions (``python import_cycles.py DIR``).

An import inside a function still makes one module depend on the other; it only hides the cycle until the function
runs. So every ``import``/``from ... import`` statement anywhere in a module counts, except inside an
``if TYPE_CHECKING:`` block (never executed). Only edges between modules of the package are kept. Implicit parent
imports are not edges (importing ``pkg.a.b`` runs ``pkg/a/__init__.py`` first, which would make every package
with re-exports cyclic), and ``from <ancestor package> import <submodule>`` is an edge to the submodule only (the
ancestor is already being imported); a name taken from an ancestor's ``__init__`` that is not a submodule is an
edge to that ``__init__``.

Standalone on purpose: no pytest_autotune import, so it can check any package directory.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

__all__ = ["find_cycles", "import_graph"]


def _package_name(package_dir: Path) -> str:
    """Dotted name of ``package_dir``: its own name, prefixed by every parent folder that is a package too."""
    parts = [package_dir.name]
    parent = package_dir.parent
    while (parent / "__init__.py").is_file():
        parts.insert(0, parent.name)
        parent = parent.parent
    return ".".join(parts)


def _modules(package_dir: Path) -> dict[str, tuple[Path, bool]]:
    """module name -> (file, is a package __init__)."""
    root = _package_name(package_dir)
    out: dict[str, tuple[Path, bool]] = {}
    for path in sorted(package_dir.rglob("*.py")):
        rel = path.relative_to(package_dir).with_suffix("")
        if any(not (package_dir / Path(*rel.parts[:i]) / "__init__.py").is_file() for i in range(1, len(rel.parts))):
            continue  # a folder that is not a package
        parts = list(rel.parts)
        is_init = parts[-1] == "__init__"
        if is_init:
            parts = parts[:-1]
        out[".".join([root, *parts])] = (path, is_init)
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement, wherever it is (functions included), except under ``if TYPE_CHECKING:``."""
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:  # the else branch does run
                visit(child)
            return
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def _resolve(module: str, is_init: bool, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    package = module.split(".") if is_init else module.split(".")[:-1]
    base = package[: len(package) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def import_graph(package_dir: str | Path) -> dict[str, set[str]]:
    """module -> the modules of the same package it imports (see the module docstring for what counts)."""
    package_dir = Path(package_dir).resolve()
    modules = _modules(package_dir)
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module, (path, is_init) in modules.items():
        ancestors = {".".join(module.split(".")[:i]) for i in range(1, module.count(".") + 1)}
        if is_init:
            ancestors.add(module)
        for node in _imports(ast.parse(path.read_text(), str(path))):
            targets: set[str] = set()
            if isinstance(node, ast.Import):
                targets = {alias.name for alias in node.names}
            else:
                base = _resolve(module, is_init, node)
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    # a submodule, or a name its package's __init__ must have defined by now
                    targets.add(sub if sub in modules else base)
                if base not in ancestors:
                    targets.add(base)
            graph[module] |= {t for t in targets if t in modules and t != module}
    return graph


def _sccs(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    m = stack.pop()
                    on_stack.discard(m)
                    component.append(m)
                    if m == node:
                        break
                out.append(sorted(component))
    return out


def _cycle_in(component: list[str], graph: dict[str, set[str]]) -> list[str]:
    """One concrete cycle through the component's first module: [a, b, ..., a] (breadth-first: a shortest one)."""
    members = set(component)
    start = component[0]
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for child in sorted(graph[node] & members):
                if child == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(previous[path[-1]])
                    return [start, *reversed(path[:-1]), start] if node != start else [start, start]
                if child not in previous:
                    previous[child] = node
                    following.append(child)
        frontier = following
    return component  # pragma: no cover - a component of two or more modules always has a cycle


def find_cycles(package_dir: str | Path) -> list[list[str]]:
    """One import cycle per strongly connected group of modules in ``package_dir``, each as ``[a, b, ..., a]``;
    empty when the package has none."""
    graph = import_graph(package_dir)
    return [_cycle_in(c, graph) for c in _sccs(graph) if len(c) > 1]


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python import_cycles.py PACKAGE_DIR", file=sys.stderr)
        return 2
    cycles = find_cycles(argv[0])
    for cycle in cycles:
        print(" -> ".join(cycle))
    print(f"{len(cycles)} import cycle(s) in {argv[0]}")
    return 1 if cycles else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
