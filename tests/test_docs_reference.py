"""The reference pages list what the code has: every protocol key (pytest_autotune/protocol_sections.py and the
shipped protocol.toml) in docs/reference/protocol.md under its section, every plugin option (the plugin's
pytest_addoption) in docs/reference/options.md, every `autotune` command and its arguments (cli.py's argparse) in
docs/reference/cli.md, every hook (hookspec.py) in docs/reference/hooks.md, every field of the JSON report's schema
in docs/reference/report.md, every store table in docs/reference/store.md, every fixture, marker and
``ItemOutcome`` field in docs/reference/fixtures.md, every built-in provenance key in docs/reference/hooks.md, and
every environment variable the package reads in docs/reference/environment.md. A failure names what is missing and
from which page: add it there."""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import json
import re
import sys
import typing

from docs_pages import REPO

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

REF = REPO / "docs" / "reference"


def _sections(page: str, level: str) -> dict[str, str]:
    """A page's ``level`` sections (e.g. "###"): heading text -> body (to the next heading of that level or above)."""
    out: dict[str, str] = {}
    current, body = None, []
    for line in (REF / page).read_text(encoding="utf-8").splitlines():
        m = re.match(r"^(#+) (.*)$", line)
        if m and len(m.group(1)) <= len(level):
            if current is not None:
                out[current] = "\n".join(body)
            current, body = (m.group(2) if len(m.group(1)) == len(level) else None), []
            continue
        body.append(line)
    if current is not None:
        out[current] = "\n".join(body)
    return out


# ------------------------------------------------------------------------------------------ protocol keys


def _section_keys(cls, prefix: str) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.name in ("sha256", "path", "text"):
            continue
        t = hints[f.name]
        name = f"{prefix}.{f.name}" if prefix else f.name
        if dataclasses.is_dataclass(t):
            sub = _section_keys(t, name)
            leaves = {g.name for g in dataclasses.fields(t) if not dataclasses.is_dataclass(typing.get_type_hints(t)[g.name])}
            if leaves:
                out[name] = leaves
            out.update({k: v for k, v in sub.items() if k != name})
        elif typing.get_origin(t) in (dict, typing.Mapping, __import__("collections.abc").abc.Mapping):
            value = typing.get_args(t)[1]
            out[f"{name}.<dtype>"] = {g.name for g in dataclasses.fields(value)}
    return out


def protocol_keys() -> dict[str, set[str]]:
    """[section] -> its keys, from the dataclasses and from the shipped protocol.toml (a key in either counts)."""
    from pytest_autotune.protocol import Protocol

    keys = _section_keys(Protocol, "")
    data = tomllib.loads((REPO / "protocol.toml").read_text())

    def walk(d: dict, prefix: str) -> None:
        for k, v in d.items():
            name = f"{prefix}.{k}" if prefix else k
            if prefix == "tolerance":
                keys.setdefault("tolerance.<dtype>", set()).update(v)
            elif isinstance(v, dict):
                walk(v, name)
            else:
                keys.setdefault(prefix, set()).add(k)

    walk(data, "")
    return keys


def _protocol_section(sections: dict[str, str], section: str) -> str | None:
    for heading, body in sections.items():
        m = re.match(r"\[([^\]]+)\]", heading.replace("&lt;", "<").replace("&gt;", ">"))
        if m and m.group(1) == section:
            return body
    return None


def test_every_protocol_key_is_in_the_protocol_reference():
    sections = _sections("protocol.md", "###")
    missing = []
    for section, keys in sorted(protocol_keys().items()):
        body = _protocol_section(sections, section)
        if body is None:
            missing.append(f"section [{section}] ({', '.join(sorted(keys))}): no '### [{section}]' heading")
            continue
        for key in sorted(keys):
            if not re.search(rf"(?<![\w.]){re.escape(key)}(?![\w])", body):
                missing.append(f"[{section}].{key}")
    assert not missing, ("missing from docs/reference/protocol.md (document each key under its section's heading, "
                         "and in its comment in protocol.toml):\n" + "\n".join(missing))


# ------------------------------------------------------------------------------------------ plugin options


class _Group:
    def __init__(self, into: list[str]) -> None:
        self.into = into

    def addoption(self, *names: str, **kw: object) -> None:
        self.into.extend(n for n in names if n.startswith("--"))

    def _addoption(self, *names: str, **kw: object) -> None:
        self.addoption(*names, **kw)


class _Parser(_Group):
    def getgroup(self, *a: object, **kw: object) -> _Group:
        return _Group(self.into)

    def addini(self, *a: object, **kw: object) -> None:
        pass


def plugin_options() -> list[str]:
    """The plugin's options, and those of the modules it loads with it (its ``pytest_plugins``)."""
    import importlib

    from pytest_autotune import plugin

    names: list[str] = []
    for module in (plugin, *(importlib.import_module(m) for m in plugin.pytest_plugins)):
        module.pytest_addoption(_Parser(names))  # type: ignore[arg-type]
    return names


def test_every_plugin_option_is_in_the_options_reference():
    page = (REF / "options.md").read_text(encoding="utf-8")
    names = plugin_options()
    assert "--autotune" in names and "--autotune-pairs" in names
    missing = [n for n in names if not re.search(rf"`{re.escape(n)}(?![\w-])", page)]
    assert not missing, f"plugin options missing from docs/reference/options.md: {missing}"


# ------------------------------------------------------------------------------------------ autotune CLI


def cli_commands() -> dict[str, list[str]]:
    """'autotune X Y' -> its arguments (option strings, and positionals by metavar or dest)."""
    from pytest_autotune.cli import build_parser

    out: dict[str, list[str]] = {}

    def walk(p: argparse.ArgumentParser, path: list[str]) -> None:
        args = []
        for a in p._actions:
            if isinstance(a, (argparse._SubParsersAction, argparse._HelpAction)):
                continue
            args.append(a.option_strings[-1] if a.option_strings else str(a.metavar or a.dest))
        if len(path) > 1:
            out[" ".join(path)] = args
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                for name, sub in a.choices.items():
                    walk(sub, path + [name])

    walk(build_parser(), ["autotune"])
    return out


def test_every_autotune_command_and_argument_is_in_the_cli_reference():
    sections = {h.strip("`"): body for h, body in _sections("cli.md", "##").items()}
    missing = []
    for command, args in sorted(cli_commands().items()):
        body = sections.get(command)
        if body is None:
            missing.append(f"command `{command}`: no '## `{command}`' heading")
            continue
        missing += [f"`{command}` {a}" for a in args if f"`{a}`" not in body]
    assert not missing, "missing from docs/reference/cli.md:\n" + "\n".join(missing)


# ------------------------------------------------------------------------------------------ hooks, report, store


def test_every_hook_is_in_the_hooks_reference():
    from pytest_autotune import hookspec

    page = (REF / "hooks.md").read_text(encoding="utf-8")
    hooks = [n for n, _ in inspect.getmembers(hookspec, inspect.isfunction) if n.startswith("pytest_autotune_")]
    missing = [h for h in hooks if f"## `{h}`" not in page]
    assert hooks and not missing, f"hooks missing from docs/reference/hooks.md (a '## `name`' section each): {missing}"


def report_fields() -> list[str]:
    """Dotted names of the JSON report's fields: top level, run, items, summary (with precision), compare."""
    schema = json.loads((REPO / "pytest_autotune" / "report" / "report.schema.json").read_text())
    defs = schema.get("$defs", {})

    def props(node: dict, prefix: str, depth: int) -> list[str]:
        if "$ref" in node:
            node = defs[node["$ref"].split("/")[-1]]
        if node.get("type") == "array" or "items" in node and isinstance(node.get("items"), dict):
            node = node.get("items", {})
            if "$ref" in node:
                node = defs[node["$ref"].split("/")[-1]]
        out = []
        for name, sub in (node.get("properties") or {}).items():
            dotted = f"{prefix}.{name}" if prefix else name
            out.append(dotted)
            if depth < 2 and isinstance(sub, dict):
                out += props(sub, dotted, depth + 1)
        return out

    return props(schema, "", 0)


def test_every_report_field_is_in_the_report_reference():
    page = (REF / "report.md").read_text(encoding="utf-8")
    missing = [f for f in report_fields() if not re.search(rf"(?<![\w]){re.escape(f.split('.')[-1])}(?![\w])", page)]
    assert not missing, f"JSON report fields missing from docs/reference/report.md: {missing}"


def test_every_store_table_is_in_the_store_reference():
    from pytest_autotune.store import schema

    page = (REF / "store.md").read_text(encoding="utf-8")
    missing = [t for t in schema.OWN_TABLES if f"`{t}`" not in page]
    assert not missing, f"store tables missing from docs/reference/store.md: {missing}"


# ------------------------------------------------------------------------------------------ fixtures and markers


def _plugin_sources(word: str) -> list[ast.Module]:
    """The package's modules whose text holds ``word``, parsed."""
    texts = [p.read_text(encoding="utf-8") for p in sorted((REPO / "pytest_autotune").rglob("*.py"))
             if "__pycache__" not in p.parts]
    return [ast.parse(t) for t in texts if word in t]


def plugin_fixtures() -> list[str]:
    """Functions the package decorates with ``pytest.fixture`` (its fixtures module is registered as a plugin)."""
    out = []
    for tree in _plugin_sources("fixture"):
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for d in node.decorator_list:
                    target = d.func if isinstance(d, ast.Call) else d
                    if ast.unparse(target) in ("pytest.fixture", "fixture"):
                        out.append(node.name)
    return sorted(out)


def plugin_markers() -> list[str]:
    """Markers the package registers: ``config.addinivalue_line("markers", "NAME...: what")``."""
    out = []
    for tree in _plugin_sources("addinivalue_line"):
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "addinivalue_line" and len(node.args) == 2
                    and isinstance(node.args[0], ast.Constant) and node.args[0].value == "markers"
                    and isinstance(node.args[1], ast.Constant)):
                out.append(re.match(r"[\w]+", node.args[1].value).group(0))  # type: ignore[union-attr]
    return sorted(out)


def test_every_fixture_marker_and_item_outcome_field_is_in_the_fixtures_reference():
    from pytest_autotune.result import ItemOutcome

    page = (REF / "fixtures.md").read_text(encoding="utf-8")
    fixtures, markers = plugin_fixtures(), plugin_markers()
    assert {"autotune", "frozen_baseline", "paired_seeds", "device"} <= set(fixtures), fixtures
    assert {"autotune_problem", "anchor"} <= set(markers), markers
    missing = [f"fixture {f}: no '### `{f}`' heading" for f in fixtures if f"### `{f}`" not in page]
    missing += [f"marker {m}" for m in markers if not re.search(rf"^\| `{m}(\(|`)", page, flags=re.M)]
    outcome = page[page.index("## `ItemOutcome`"):] if "## `ItemOutcome`" in page else ""
    missing += [f"ItemOutcome.{f.name}" for f in dataclasses.fields(ItemOutcome) if f"`{f.name}`" not in outcome]
    assert not missing, "missing from docs/reference/fixtures.md:\n" + "\n".join(missing)


def test_every_builtin_provenance_key_is_in_the_hooks_reference():
    from pytest_autotune.provenance import builtin_keys

    page = (REF / "hooks.md").read_text(encoding="utf-8")
    missing = [f"{k.name} ({k.scope})" for k in builtin_keys()
               if not re.search(rf"^\| `{re.escape(k.name)}` \| {k.scope} \|", page, flags=re.M)]
    assert not missing, f"provenance keys missing from docs/reference/hooks.md's table: {missing}"


# ------------------------------------------------------------------------------------------ environment variables

#: reads of a variable whose name is chosen at run time, and where the reference covers them
DYNAMIC_READS = {
    ("pytest_autotune/study/agent/client.py", "env_name"): "the variable `--api-key-env` names",
    ("pytest_autotune/study/agent/loop.py", "key_env"): "the variable `--api-key-env` names",
}


def test_every_environment_variable_the_package_reads_is_in_the_environment_reference():
    from env_reads import scan_package

    page = (REF / "environment.md").read_text(encoding="utf-8")
    reads = scan_package(REPO / "pytest_autotune")
    assert "PYTEST_AUTOTUNE_BUDGET_SCALE" in reads.names and "CUDA_" in reads.prefixes  # the scan sees the code
    missing = [f"`{n}` (read in {', '.join(sorted(f))})" for n, f in sorted(reads.names.items())
               if f"`{n}`" not in page]
    missing += [f"`{p}*` (kept in {', '.join(sorted(f))})" for p, f in sorted(reads.prefixes.items())
                if f"`{p}*`" not in page]
    for rel, line, expr in sorted(reads.dynamic):
        covered = DYNAMIC_READS.get((rel, expr))
        if covered is None:
            missing.append(f"{rel}:{line}: os.environ read of `{expr}`, a name this test cannot resolve: make it a "
                           "constant, or add it to DYNAMIC_READS with what the reference says of it")
        elif covered not in page:
            missing.append(f"{rel}:{line}: {covered}")
    assert not missing, "missing from docs/reference/environment.md:\n" + "\n".join(missing)


def test_the_environment_scan_finds_each_form_of_read():
    from env_reads import scan_sources

    src = '''
import os
from os import getenv
NAME = "A_CONST"
KEEP = ("K1", "K2")
PREFIXES = ("P_",)
def f(environ=os.environ, other=None):
    os.environ.get("A_GET"); os.environ.pop(NAME, None); getenv("A_GETENV"); os.getenv("A_OSGETENV")
    x = os.environ["A_ITEM"]; y = "A_IN" in os.environ; z = environ.get("A_PARAM")
    os.environ["WRITTEN"] = "1"
    kept = {k: v for k, v in os.environ.items() if k in KEEP or k.startswith(PREFIXES)}
    each = {k: os.environ[k] for k in ("L1", "L2") if k in os.environ}
    return os.environ.get(other)
'''
    reads = scan_sources({"m.py": src})
    assert set(reads.names) == {"A_GET", "A_CONST", "A_GETENV", "A_OSGETENV", "A_ITEM", "A_IN", "A_PARAM", "K1", "K2",
                                "L1", "L2"}
    assert set(reads.prefixes) == {"P_"}
    assert reads.dynamic == {("m.py", 13, "other")}
