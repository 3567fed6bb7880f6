"""Finding problems, candidates and baselines on disk (docs/architecture.md#the-flow; docs/guide/candidates.md). Reads directory listings only: nothing
here imports a candidate."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from .model import BaselineRef, CandidateKind, CandidateRef, ProblemRef

#: the bundled suite, relative to the rootdir: collected by every session (docs/guide/candidates.md)
BUNDLED_ROOT = Path("benchmarks") / "kernels"
CANDIDATES_DIR = "candidates"
BASELINES_DIR = "baselines"
MLX_SUBDIR = "mlx"
#: candidates that run only on a CUDA device (CUDA C++, Triton): collected with --device=cuda alone
CUDA_SUBDIR = "cuda"
#: candidates that run only on the CPU (C++ on the tensors' host memory): collected with --device=cpu alone
CPU_SUBDIR = "cpu"
TEMPLATES_DIR = "templates"  # search templates (docs/guide/studies.md): candidates-to-be, never problems
_SKIP_DIRS = {CANDIDATES_DIR, BASELINES_DIR, "__pycache__", MLX_SUBDIR, CUDA_SUBDIR, CPU_SUBDIR, TEMPLATES_DIR}


def is_problem_file(path: Path, roots: Sequence[Path]) -> bool:
    """A ``.py`` file under one of ``roots`` that is not a candidate, baseline, conftest, test or private file."""
    if path.suffix != ".py" or path.name.startswith(("_", "test_", "conftest")):
        return False
    path = path.resolve()
    for root in roots:
        root = root.resolve()
        try:
            rel = path.relative_to(root)
        except ValueError:
            continue
        if any(part in _SKIP_DIRS or part.startswith(".") for part in rel.parts[:-1]):
            return False
        return True
    return False


def _py_files(d: Path) -> list[Path]:
    if not d.is_dir():
        return []
    return sorted(p for p in d.glob("*.py") if not p.name.startswith("_"))


def candidates_for(problem: ProblemRef, extra_dirs: Sequence[Path], kind: CandidateKind,
                   device: str = "cpu") -> list[CandidateRef]:
    """Candidates beside the suite (``candidates/<stem>/``) and under each ``--candidates DIR/<stem>/``.
    MLX candidates live one level down, in ``mlx/``; candidates for CUDA devices only (CUDA C++, Triton) in
    ``cuda/``, collected with ``--device=cuda``; candidates for the CPU only (C++ reading the tensors' host memory) in
    ``cpu/``, collected with ``--device=cpu``. Names are made unique by their origin when they clash."""
    dirs = [problem.path.parent / CANDIDATES_DIR / problem.name] + [Path(d) / problem.name for d in extra_dirs]
    seen: dict[str, Path] = {}
    out: list[CandidateRef] = []
    for d in dirs:
        only = {"cuda": [d / CUDA_SUBDIR], "cpu": [d / CPU_SUBDIR]}.get(device, [])
        folders = [d / MLX_SUBDIR] if kind == "mlx" else [d] + only
        for p in [p for folder in folders for p in _py_files(folder)]:
            name = p.stem
            if name in seen and seen[name].resolve() != p.resolve():
                name = f"{d.parent.name}.{p.stem}"
            if name in seen:
                continue
            seen[name] = p
            out.append(CandidateRef(name=name, path=p, kind=kind))
    return out


def baselines_for(problem: ProblemRef) -> list[BaselineRef]:
    """Declared frozen baselines (``baselines/<stem>/*.py``), besides the reference."""
    return [BaselineRef(p.stem, p) for p in _py_files(problem.path.parent / BASELINES_DIR / problem.name)]
