"""Engine declaration files: ``benchmarks/engines/<engine>.toml``.

One file per engine names the engine, the model, the flags both arms share, the workloads, the configurations
to measure against the engine's default, and the flag space a search may draw from::

    engine = "vllm"

    [model]                      # autotune engine make-model: made on first use, cached by its spec
    seed = 0

    [server]                     # shared by the default and every configuration (part of the baseline)
    flags = { enforce-eager = true, dtype = "float32", max-model-len = 1024 }
    env = { VLLM_CPU_KVCACHE_SPACE = "1" }

    [workloads.short]            # profile defaults: pytest_autotune/engines/workload.py
    profile = "short"

    [configs.max-num-seqs-4]     # one item per (configuration x workload): max-num-seqs-4[short]
    flags = { max-num-seqs = 4 }
    workloads = ["short"]        # default: every workload

    [space]                      # the declared flag space (seeded random search draws assignments from it)
    max-num-seqs = [4, 8, 16, 32, 64, 128, 256]

A configuration may declare ``expect = "refused:quality"`` (or ``"refused:delivery"``): it is a demonstration
that the gate refuses it, reported as an expected failure (xfail); accepted, it fails.
"""

from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from .adapters.base import FlagSet
from .model import ModelSpec
from .workload import Workload, WorkloadError

DEFAULT_CONFIG = "default"
#: the A/A configuration (``--autotune-aa``): the default measured against itself, to see the harness's own bias
#: and how often its CI covers 1.0 (docs/guide/engines.md)
AA_CONFIG = "default-aa"
EXPECT_GATES = ("quality", "delivery", "timing")
_TOP_KEYS = {"engine", "description", "model", "server", "workloads", "configs", "space"}
_CONFIG_KEYS = {"flags", "raw", "workloads", "description", "expect"}


class DeclarationError(ValueError):
    """A declaration file that cannot be used: names the file, the key and the fix."""


@dataclass(frozen=True)
class EngineConfig:
    name: str
    flags: FlagSet
    workloads: tuple[str, ...]
    description: str = ""
    expect_refusal: Optional[str] = None  # gate name, for demonstration configurations


@dataclass(frozen=True)
class EngineDeclaration:
    path: Path
    engine: str
    model: ModelSpec
    server_flags: FlagSet
    server_env: Mapping[str, str]
    workloads: Mapping[str, Workload]
    configs: Mapping[str, EngineConfig]
    space: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)
    description: str = ""
    sha256: str = ""

    def default_flags(self) -> FlagSet:
        return self.server_flags

    def flags_of(self, config: EngineConfig) -> FlagSet:
        return self.server_flags.merged(config.flags)

    def aa_config(self, workload: str) -> EngineConfig:
        return EngineConfig(AA_CONFIG, FlagSet(), (workload,), "A/A: the engine's default against itself")

    def arm_digest(self, flags: FlagSet) -> str:
        """Digest of what a launch runs: engine, effective flags, environment, model spec."""
        blob = json.dumps({"engine": self.engine, "flags": json.loads(flags.canonical()),
                           "env": dict(sorted(self.server_env.items())),
                           "model": self.model.key()}, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()


#: flags pytest-autotune sets itself (bind address, port, model): a declaration may not set or override them
RESERVED_FLAGS = ("host", "port", "model", "model-path", "served-model-name", "alias", "m")


def _flagset(table: Mapping[str, Any], where: str) -> FlagSet:
    flags = table.get("flags", {})
    raw = table.get("raw", [])
    if not isinstance(flags, dict):
        raise DeclarationError(f"{where}.flags must be a table, e.g. flags = {{ max-num-seqs = 4 }}")
    if not isinstance(raw, list) or not all(isinstance(a, str) for a in raw):
        raise DeclarationError(f"{where}.raw must be a list of strings (arguments passed verbatim)")
    for k in flags:
        if k.startswith("-"):
            raise DeclarationError(f"{where}.flags: write flag names without dashes ({k!r} -> {k.lstrip('-')!r})")
        if k in RESERVED_FLAGS:
            raise DeclarationError(f"{where}.flags: {k!r} is set by pytest-autotune (127.0.0.1, a free port, the "
                                   "declared model); remove it")
    for a in raw:
        name = a.lstrip("-").split("=", 1)[0]
        if a.startswith("-") and name in RESERVED_FLAGS:
            raise DeclarationError(f"{where}.raw: {a!r} would override what pytest-autotune sets (127.0.0.1, a free "
                                   "port, the declared model); remove it")
    return FlagSet.of(flags, raw)


def load_declaration(path: Path) -> EngineDeclaration:
    path = Path(path)
    raw_bytes = path.read_bytes()
    try:
        data = tomllib.loads(raw_bytes.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise DeclarationError(f"{path}: not valid TOML: {e}") from e
    return parse_declaration(data, path, hashlib.sha256(raw_bytes).hexdigest())


def is_declaration(data: Mapping[str, Any]) -> bool:
    return isinstance(data.get("engine"), str) and isinstance(data.get("configs"), dict)


def parse_declaration(data: Mapping[str, Any], path: Path, sha256: str = "") -> EngineDeclaration:
    where = str(path)
    unknown = sorted(set(data) - _TOP_KEYS)
    if unknown:
        raise DeclarationError(f"{where}: unknown key {unknown[0]!r}; known: {', '.join(sorted(_TOP_KEYS))}")
    engine = data.get("engine")
    if not isinstance(engine, str) or not engine:
        raise DeclarationError(f"{where}: engine = \"vllm\" (or llamacpp, sglang) is missing")
    try:
        model = ModelSpec(**dict(data.get("model", {})))
    except TypeError as e:
        raise DeclarationError(f"{where}: [model]: {e}; keys are the fields of ModelSpec (seed, layers, hidden, "
                               "heads, kv_heads, intermediate, vocab_size, ...)") from e
    except ValueError as e:
        raise DeclarationError(f"{where}: [model]: {e}") from e
    server = dict(data.get("server", {}))
    bad = sorted(set(server) - {"flags", "raw", "env"})
    if bad:
        raise DeclarationError(f"{where}: [server]: unknown key {bad[0]!r} (flags, raw, env)")
    server_flags = _flagset(server, f"{where}: [server]")
    env = server.get("env", {})
    if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
        raise DeclarationError(f"{where}: [server].env must be a table of strings, e.g. env = {{ X = \"1\" }}")
    workloads: dict[str, Workload] = {}
    for name, table in dict(data.get("workloads", {})).items():
        try:
            workloads[name] = Workload.from_table(name, table, where + ": ")
        except WorkloadError as e:
            raise DeclarationError(str(e)) from e
    if not workloads:
        raise DeclarationError(f"{where}: declare at least one workload, e.g. [workloads.short] profile = \"short\"")
    configs: dict[str, EngineConfig] = {}
    for name, table in dict(data.get("configs", {})).items():
        cw = f"{where}: [configs.{name}]"
        if name == DEFAULT_CONFIG:
            raise DeclarationError(f"{cw}: 'default' is the engine's default (the baseline of every item); "
                                   "name the configuration differently")
        if not isinstance(table, dict):
            raise DeclarationError(f"{cw} must be a table")
        bad = sorted(set(table) - _CONFIG_KEYS)
        if bad:
            raise DeclarationError(f"{cw}: unknown key {bad[0]!r}; known: {', '.join(sorted(_CONFIG_KEYS))}")
        wl = table.get("workloads", list(workloads))
        missing = [w for w in wl if w not in workloads]
        if missing:
            raise DeclarationError(f"{cw}: workload {missing[0]!r} is not declared ([workloads.{missing[0]}])")
        expect = table.get("expect")
        gate = None
        if expect is not None:
            if not (isinstance(expect, str) and expect.startswith("refused:") and expect[8:] in EXPECT_GATES):
                raise DeclarationError(f"{cw}: expect must be one of "
                                       + ", ".join(f'"refused:{g}"' for g in EXPECT_GATES))
            gate = expect[8:]
        flags = _flagset(table, cw)
        if not flags:
            raise DeclarationError(f"{cw}: sets no flag; a configuration is the default plus flags")
        configs[name] = EngineConfig(name, flags, tuple(wl), str(table.get("description", "")), gate)
    space: dict[str, tuple[Any, ...]] = {}
    for flag, choices in dict(data.get("space", {})).items():
        if not isinstance(choices, list) or not choices:
            raise DeclarationError(f"{where}: [space].{flag} must be a non-empty list of values")
        space[flag.lstrip("-")] = tuple(choices)
    return EngineDeclaration(path=path, engine=engine, model=model, server_flags=server_flags,
                             server_env=dict(env), workloads=workloads, configs=configs, space=space,
                             description=str(data.get("description", "")), sha256=sha256)
