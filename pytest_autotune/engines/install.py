"""``autotune engine install vllm|llamacpp``: each engine in its own venv or build folder, cached, idempotent.

Engines are large (vLLM's CPU build is a 3.4 GB venv with its own torch) and must never share an environment with
the harness: the harness's torch and the engine's are different builds. Each engine lives under
``<cache>/<engine>/`` (``<cache>`` = ``$PYTEST_AUTOTUNE_ENGINE_CACHE``, else ``$XDG_CACHE_HOME/pytest-autotune/
engines``, else ``~/.cache/pytest-autotune/engines``), built by the adapter's *recipe*. ``installed.json`` is
written last, naming the recipe's digest and the engine's version: an install whose marker names the current
recipe (and whose check still passes) is reused as it is, so a second ``install`` is a no-op, an interrupted one
is redone, and a changed recipe (a new pinned version) rebuilds. A file lock keeps two processes from building
the same engine at once. Every command and its output go to ``<cache>/<engine>/install.log``.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import json
import os
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Optional, Sequence

from ..errors import AutotuneError

if TYPE_CHECKING:  # pragma: no cover
    from .adapters.base import EngineAdapter

CACHE_ENV = "PYTEST_AUTOTUNE_ENGINE_CACHE"
MARKER = "installed.json"
LogFn = Callable[[str], None]


class EngineInstallError(AutotuneError):
    """An install step failed; the message names the step, the log and what to do."""


def cache_root() -> Path:
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "pytest-autotune" / "engines"


@dataclass(frozen=True)
class Installation:
    """An installed engine: where it is, its version, and what the adapter needs to start it."""

    engine: str
    root: Path
    version: str
    recipe_sha256: str
    installed_at: str
    paths: dict[str, str] = field(default_factory=dict)  # e.g. {"python": ".../venv/bin/python"}

    def path(self, key: str) -> Path:
        if key not in self.paths:
            raise EngineInstallError(f"{self.engine} installation at {self.root} has no '{key}': reinstall it "
                                     f"(autotune engine install {self.engine} --force)")
        return Path(self.paths[key])

    def to_json(self) -> dict[str, Any]:
        return {"engine": self.engine, "root": str(self.root), "version": self.version,
                "recipe_sha256": self.recipe_sha256, "installed_at": self.installed_at, "paths": self.paths}


class Runner:
    """Runs recipe steps with their output appended to the install log; a failing step raises."""

    def __init__(self, engine: str, log: Path, echo: Optional[LogFn] = None) -> None:
        self.engine = engine
        self.log = log
        self.echo = echo or (lambda s: None)

    def note(self, text: str) -> None:
        self.echo(text)
        with open(self.log, "a") as f:
            f.write(f"# {text}\n")

    def run(self, argv: Sequence[str | Path], *, cwd: Optional[Path] = None, env: Optional[dict] = None,
            what: str = "") -> str:
        args = [str(a) for a in argv]
        shown = shlex.join(args)
        self.note(f"{what or 'run'}: {shown}")
        t0 = time.perf_counter()
        full_env = {**os.environ, **(env or {})}
        with open(self.log, "ab") as f:
            proc = subprocess.run(args, cwd=cwd, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            f.write(proc.stdout)
        out = proc.stdout.decode("utf-8", "replace")
        if proc.returncode != 0:
            tail = "\n".join(out.splitlines()[-25:])
            raise EngineInstallError(
                f"installing {self.engine}: step '{what or shown}' failed (exit {proc.returncode}) after "
                f"{time.perf_counter() - t0:.0f} s; full output in {self.log}\n{tail}")
        self.echo(f"  done in {time.perf_counter() - t0:.0f} s")
        return out


def engine_dir(engine: str) -> Path:
    return cache_root() / engine


def recipe_digest(recipe: str) -> str:
    return hashlib.sha256(recipe.encode()).hexdigest()


def read_marker(engine: str) -> Optional[Installation]:
    p = engine_dir(engine) / MARKER
    try:
        d = json.loads(p.read_text())
        return Installation(engine=d["engine"], root=Path(d["root"]), version=d["version"],
                            recipe_sha256=d["recipe_sha256"], installed_at=d["installed_at"],
                            paths=dict(d.get("paths") or {}))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def find_installation(adapter: "EngineAdapter") -> Optional[Installation]:
    """The engine's installation when its marker names the adapter's current recipe and its files are there."""
    inst = read_marker(adapter.name)
    if inst is None or inst.recipe_sha256 != recipe_digest(adapter.recipe()):
        return None
    if any(not Path(p).exists() for p in inst.paths.values()):
        return None
    return inst


@contextlib.contextmanager
def _install_lock(root: Path) -> Iterator[None]:
    import fcntl

    root.mkdir(parents=True, exist_ok=True)
    fd = os.open(root / ".install.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def install(adapter: "EngineAdapter", *, force: bool = False, echo: Optional[LogFn] = None) -> Installation:
    """Install (or reuse) ``adapter``'s engine. Idempotent; ``force`` rebuilds."""
    echo = echo or (lambda s: None)
    if adapter.install_unsupported_reason():
        raise EngineInstallError(adapter.install_unsupported_reason())
    root = engine_dir(adapter.name)
    with _install_lock(root):
        if not force:
            existing = find_installation(adapter)
            if existing is not None:
                try:
                    adapter.check_installation(existing)
                except EngineInstallError as e:
                    echo(f"{adapter.name}: the existing installation fails its check ({e}); reinstalling")
                else:
                    echo(f"{adapter.name} {existing.version} already installed in {root} (recipe unchanged)")
                    return existing
        marker = root / MARKER
        if marker.exists():
            marker.unlink()
        log = root / "install.log"
        with open(log, "a") as f:
            f.write(f"\n=== {datetime.datetime.now(datetime.timezone.utc).isoformat()} install {adapter.name} "
                    f"(python {sys.version.split()[0]})\n")
        runner = Runner(adapter.name, log, echo)
        t0 = time.perf_counter()
        paths = adapter.build(root, runner)
        inst = Installation(engine=adapter.name, root=root, version="?", recipe_sha256=recipe_digest(adapter.recipe()),
                            installed_at=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                            paths={k: str(v) for k, v in paths.items()})
        version = adapter.check_installation(inst)
        inst = Installation(**{**inst.__dict__, "version": version})
        tmp = marker.with_suffix(".tmp")
        tmp.write_text(json.dumps(inst.to_json(), indent=2, sort_keys=True) + "\n")
        os.replace(tmp, marker)
        runner.note(f"{adapter.name} {version} installed in {time.perf_counter() - t0:.0f} s")
        return inst
