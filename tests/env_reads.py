"""Which environment variables a package's code reads, found in its source (ast): ``os.environ.get(X)``,
``os.environ.pop(X)``, ``os.getenv(X)``, ``os.environ[X]``, ``X in os.environ`` (and the same through a parameter
whose default is ``os.environ``), and the names and prefixes a
comprehension over ``os.environ`` keeps (``{k: v for k, v in os.environ.items() if k in KEEP or
k.startswith(PREFIXES)}``). ``X`` is a string literal, or a name bound to one (or to a tuple of them) in the
function, the module or anywhere in the package; a comprehension's variable is resolved through what it iterates.
What cannot be resolved is returned as *dynamic* reads, by file, line and expression, for a reader to place."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional


@dataclass
class EnvReads:
    names: dict[str, set[str]] = field(default_factory=dict)  # variable -> files that read it
    prefixes: dict[str, set[str]] = field(default_factory=dict)  # "CUDA_" -> files that keep every CUDA_* variable
    dynamic: set[tuple[str, int, str]] = field(default_factory=set)  # (file, line, expression)


def _is_environ(node: ast.AST, aliases: frozenset[str] = frozenset()) -> bool:
    """``os.environ``, or a parameter whose default is ``os.environ`` (``def f(environ=os.environ)``)."""
    if isinstance(node, ast.Name):
        return node.id in aliases
    return (isinstance(node, ast.Attribute) and node.attr == "environ" and isinstance(node.value, ast.Name)
            and node.value.id == "os")


def _environ_parameters(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    args = fn.args.posonlyargs + fn.args.args
    pairs = list(zip(args[len(args) - len(fn.args.defaults):], fn.args.defaults))
    pairs += [(a, d) for a, d in zip(fn.args.kwonlyargs, fn.args.kw_defaults) if d is not None]
    return {a.arg for a, d in pairs if _is_environ(d)}


def _strings(node: Optional[ast.AST]) -> Optional[list[str]]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        out: list[str] = []
        for e in node.elts:
            s = _strings(e)
            if s is None:
                return None
            out += s
        return out
    return None


def _bindings(tree: ast.AST, top_level: bool = False) -> dict[str, ast.AST]:
    """name -> the value of its first assignment of a string or a tuple of strings, anywhere in ``tree`` (or in its
    body alone)."""
    out: dict[str, ast.AST] = {}
    nodes = getattr(tree, "body", []) if top_level else ast.walk(tree)
    for node in nodes:
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        for t in targets:
            if isinstance(t, ast.Name) and _strings(value) is not None:
                out.setdefault(t.id, value)
    return out


class _Scanner(ast.NodeVisitor):
    def __init__(self, rel: str, module: dict[str, ast.AST], package: dict[str, ast.AST], out: EnvReads) -> None:
        self.rel, self.module, self.package, self.out = rel, module, package, out
        self.scopes: list[dict[str, ast.AST]] = []  # functions' bindings and comprehensions' variables, innermost last
        self.aliases: list[set[str]] = [set()]  # names that stand for os.environ, innermost function last

    def _environ(self, node: ast.AST) -> bool:
        return _is_environ(node, frozenset(self.aliases[-1]))

    # ---------------------------------------------------------------------------------------- resolving names
    def _resolve(self, node: ast.AST, depth: int = 0) -> Optional[list[str]]:
        s = _strings(node)
        if s is not None or depth > 4:
            return s
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            parts = [self._resolve(e, depth + 1) for e in node.elts]
            return None if any(p is None for p in parts) else [x for p in parts for x in p or []]
        if isinstance(node, ast.Name):
            for scope in reversed(self.scopes):
                if node.id in scope:
                    return self._resolve(scope[node.id], depth + 1)
            for table in (self.module, self.package):
                if node.id in table:
                    return _strings(table[node.id])
        return None

    def _record(self, node: ast.AST, prefix: bool = False) -> None:
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):  # each element on its own: a dynamic one is named alone
            for e in node.elts:
                self._record(e, prefix)
            return
        values = self._resolve(node)
        if values is None:
            self.out.dynamic.add((self.rel, getattr(node, "lineno", 0), ast.unparse(node)))
            return
        target = self.out.prefixes if prefix else self.out.names
        for v in values:
            target.setdefault(v, set()).add(self.rel)

    # ---------------------------------------------------------------------------------------- scopes
    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self.scopes.append(_bindings(node))
        self.aliases.append(_environ_parameters(node))
        self.generic_visit(node)
        self.aliases.pop()
        self.scopes.pop()

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def _comprehension(self, node: ast.AST) -> None:
        scope: dict[str, ast.AST] = {}
        self.scopes.append(scope)
        for gen in node.generators:  # type: ignore[attr-defined]
            self.visit(gen.iter)
            if isinstance(gen.target, ast.Name):
                scope[gen.target.id] = gen.iter
            over_environ = self._environ(gen.iter) or (
                isinstance(gen.iter, ast.Call) and isinstance(gen.iter.func, ast.Attribute)
                and self._environ(gen.iter.func.value))
            if over_environ:
                key = gen.target.elts[0] if isinstance(gen.target, ast.Tuple) else gen.target
                for cond in gen.ifs:
                    self._kept_by(cond, key.id if isinstance(key, ast.Name) else "")
            for cond in gen.ifs:
                self.visit(cond)
        for part in ("elt", "key", "value"):
            if getattr(node, part, None) is not None:
                self.visit(getattr(node, part))
        self.scopes.pop()

    visit_ListComp = visit_SetComp = visit_GeneratorExp = visit_DictComp = _comprehension  # type: ignore[assignment]

    def _kept_by(self, cond: ast.AST, key: str) -> None:
        """The names (``key in X``) and prefixes (``key.startswith(X)``) a filter over os.environ keeps."""
        for sub in ast.walk(cond):
            if (isinstance(sub, ast.Compare) and isinstance(sub.left, ast.Name) and sub.left.id == key
                    and isinstance(sub.ops[0], ast.In)):
                self._record(sub.comparators[0])
            if (isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) and sub.func.attr == "startswith"
                    and isinstance(sub.func.value, ast.Name) and sub.func.value.id == key and sub.args):
                self._record(sub.args[0], prefix=True)

    # ---------------------------------------------------------------------------------------- reads
    def visit_Call(self, node: ast.Call) -> None:
        f = node.func
        environ_call = isinstance(f, ast.Attribute) and self._environ(f.value) and f.attr in ("get", "pop")
        getenv = (isinstance(f, ast.Attribute) and f.attr == "getenv") or (isinstance(f, ast.Name) and f.id == "getenv")
        if (environ_call or getenv) and node.args:
            self._record(node.args[0])
        self.generic_visit(node)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if self._environ(node.value) and isinstance(node.ctx, ast.Load):
            self._record(node.slice)
        self.generic_visit(node)

    def visit_Compare(self, node: ast.Compare) -> None:
        if any(self._environ(c) for c in node.comparators) and isinstance(node.ops[0], ast.In):
            self._record(node.left)
        self.generic_visit(node)


def scan_sources(sources: dict[str, str]) -> EnvReads:
    """Environment reads of the modules ``sources`` (relative path -> source text)."""
    trees = {rel: ast.parse(text, filename=rel) for rel, text in sources.items()}
    package: dict[str, ast.AST] = {}
    for tree in trees.values():
        for name, value in _bindings(tree, top_level=True).items():
            package.setdefault(name, value)
    out = EnvReads()
    for rel, tree in trees.items():
        if "environ" in sources[rel] or "getenv" in sources[rel]:
            _Scanner(rel, _bindings(tree, top_level=True), package, out).visit(tree)
    return out


def scan_package(root: Path) -> EnvReads:
    return scan_sources({p.relative_to(root.parent).as_posix(): p.read_text(encoding="utf-8")
                         for p in sorted(root.rglob("*.py")) if "__pycache__" not in p.parts})
