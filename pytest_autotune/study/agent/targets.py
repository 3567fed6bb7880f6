"""What the LLM tuner searches (docs/guide/llm-tuner.md): a kernel problem (a reply is a candidate module) or an engine's
declared flag space (a reply is a flag set). A target builds the prompt, reads a reply into an artifact, writes
the artifact as a file inside the modification surface, and names the pytest session that measures it -- the
same session, gates and store as any other candidate of its kind."""

from __future__ import annotations

import json
import sys
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, Optional, Sequence

from ...errors import AutotuneUsageError
from .history import IterationOutcome
from .prompt import engine_messages, kernel_messages
from .replies import extract_code, extract_flags


def rel(p: Path, root: Path) -> str:
    try:
        return Path(p).resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return str(p)


class Target(ABC):
    kind: str = "kernel"
    suffix: str = ".py"
    lang: str = "python"

    def __init__(self, root: Path, out: Path) -> None:
        self.root = root
        self.out = out

    @property
    @abstractmethod
    def problem(self) -> str:
        """The rows' problem name."""

    @property
    @abstractmethod
    def folder(self) -> Path:
        """Where the iterations' files and manifests go (inside ``out``)."""

    @abstractmethod
    def source(self) -> str:
        """The problem file or declaration, relative to the root (for the manifest)."""

    @abstractmethod
    def messages(self, history: Sequence[IterationOutcome], iteration: int, position: int, budget: int,
                 max_tokens: int) -> list[dict[str, str]]: ...

    @abstractmethod
    def parse(self, text: str) -> tuple[Any, Optional[str]]:
        """(artifact, None) or (None, why the reply gives nothing to measure)."""

    @abstractmethod
    def write(self, name: str, artifact: Any, header: str) -> Path:
        """The artifact as a file named after ``name`` in :attr:`folder`; its path."""

    @abstractmethod
    def pytest_command(self, manifest: Path, measured: Optional[Path], *, db: Path, device: str, report: Path,
                       extra: Sequence[str]) -> list[str]:
        """The session that measures ``manifest``: its candidate file ``measured`` (None: the manifest holds only
        unusable iterations), with the manifest itself as a collection argument (its unusable iterations)."""

    def artifact_text(self, artifact: Any) -> str:
        return artifact if isinstance(artifact, str) else json.dumps(artifact, sort_keys=True)


def _pytest(manifest: Path, db: Path, device: str, report: Path) -> list[str]:
    return [sys.executable, "-m", "pytest", "--autotune", f"--study-manifest={manifest}", f"--autotune-db={db}",
            f"--device={device}", f"--autotune-json={report}", "-p", "no:cacheprovider"]


class KernelTarget(Target):
    """A KernelBench-format problem: each usable reply is ``<out>/<problem>/<name>.py``."""

    def __init__(self, root: Path, out: Path, problem_path: Path, device: str, bundled_root: Path) -> None:
        super().__init__(root, out)
        from ...problems.discovery import baselines_for
        from ...problems.model import ProblemRef

        self.path = problem_path
        self.device = device
        self.bundled_root = bundled_root
        self.baselines = [(b.name, rel(b.path, root), b.path.read_text(encoding="utf-8"))
                          for b in baselines_for(ProblemRef(problem_path.stem, problem_path)) if b.path is not None]

    @property
    def problem(self) -> str:
        return self.path.stem

    @property
    def folder(self) -> Path:
        return self.out / self.path.stem

    def source(self) -> str:
        return rel(self.path, self.root)

    def messages(self, history: Sequence[IterationOutcome], iteration: int, position: int, budget: int,
                 max_tokens: int) -> list[dict[str, str]]:
        return kernel_messages(problem=self.path, problem_rel=self.source(), device=self.device,
                               baselines=self.baselines, history=history, iteration=iteration, position=position,
                               budget=budget, max_tokens=max_tokens)

    def parse(self, text: str) -> tuple[Any, Optional[str]]:
        return extract_code(text)

    def write(self, name: str, artifact: Any, header: str) -> Path:
        path = self.folder / f"{name}.py"
        code = str(artifact)
        path.write_text(f"# {header}\n" + code + ("" if code.endswith("\n") else "\n"), encoding="utf-8")
        return path

    def pytest_command(self, manifest: Path, measured: Optional[Path], *, db: Path, device: str, report: Path,
                       extra: Sequence[str]) -> list[str]:
        cmd = _pytest(manifest, db, device, report)
        if measured is None:
            return [*cmd, *extra, str(manifest)]
        cmd.append(f"--candidates={self.out}")
        problem = self.path.resolve()
        if self.bundled_root.resolve() not in problem.parents:
            cmd.append(f"--problems={problem.parent}")
        return [*cmd, *extra, str(manifest), str(problem)]


class EngineTarget(Target):
    """An engine's declared flag space (``[space]`` of its declaration) on one workload: each usable reply is a
    declaration ``<out>/<engine>-<workload>/<name>.toml`` holding one configuration named ``<name>``."""

    kind = "engine"
    suffix = ".toml"
    lang = "json"

    def __init__(self, root: Path, out: Path, declaration: Path, workload: Optional[str]) -> None:
        super().__init__(root, out)
        from ...engines.declaration import DeclarationError, load_declaration

        try:
            self.decl = load_declaration(declaration)
        except (DeclarationError, OSError) as e:
            raise AutotuneUsageError(f"--engine: {e}") from None
        if not self.decl.space:
            raise AutotuneUsageError(f"{declaration} declares no [space]: list the flags a search may set and their "
                                     "choices (docs/guide/engines.md)")
        names = list(self.decl.workloads)
        self.workload = workload or names[0]
        if self.workload not in self.decl.workloads:
            raise AutotuneUsageError(f"--workload={self.workload}: {declaration} declares {', '.join(names)}")

    @property
    def problem(self) -> str:
        return f"{self.decl.engine}:{self.workload}"

    @property
    def folder(self) -> Path:
        return self.out / f"{self.decl.engine}-{self.workload}"

    def source(self) -> str:
        return rel(self.decl.path, self.root)

    def messages(self, history: Sequence[IterationOutcome], iteration: int, position: int, budget: int,
                 max_tokens: int) -> list[dict[str, str]]:
        wl = self.decl.workloads[self.workload].to_json()
        return engine_messages(engine=self.decl.engine, description=self.decl.description,
                               server_flags=self.decl.server_flags.as_dict(), workload=wl, space=self.decl.space,
                               history=history, iteration=iteration, position=position, budget=budget,
                               max_tokens=max_tokens)

    def parse(self, text: str) -> tuple[Any, Optional[str]]:
        return extract_flags(text, self.decl.space, self.decl.engine)

    def write(self, name: str, artifact: Any, header: str) -> Path:
        from ...engines.space import config_from_assignment, write_search_declaration

        cfg = config_from_assignment(self.decl, artifact, name=name, workloads=[self.workload], description=header)
        return write_search_declaration(self.decl, [cfg], self.folder / f"{name}.toml")

    def pytest_command(self, manifest: Path, measured: Optional[Path], *, db: Path, device: str, report: Path,
                       extra: Sequence[str]) -> list[str]:
        return [*_pytest(manifest, db, device, report), *extra, str(manifest),
                *([str(measured)] if measured is not None else [])]
