"""Compiled candidates inside a sandbox (docs/guide/compiled-candidates.md): what each role's process sets up
before its arm is imported (:func:`prepare_compiled`), and the build sandbox's one command, ``build`` (:func:`h_build`).

* ``build``: a scratch folder of its own (the jail's private ``/tmp``); torch's loaders recorded
  (:class:`~.ext_loaders.Recorder`), Triton's cache and autotuning results kept in the scratch folder; ninja's
  parallelism from ``init["max_jobs"]`` where the build pool chose it (``MAX_JOBS``, build/pool.py). ``build``
  imports the candidate, builds ``ModelNew`` and runs it once on the problem's inputs, so that lazy builds (in
  ``__init__`` or the first ``forward``), Triton's JIT compilation and its autotuning all happen here; it answers
  with the built objects' bytes, what failed with the compiler's whole output, and nothing else of the folder.
  The pool asks for it in two steps (``"stage": "import"``, then ``"call"``), so that the builds' compilers run side
  by side while the one call that uses the device runs one at a time; ``"all"`` (the default) does both.
* ``candidate`` with the item's build (the controller verified its digests and put it in the init message): the
  objects written to a scratch folder of its own, read-only, Triton's cache beside them; torch's loaders answer
  from them (:class:`~.ext_loaders.Replayer`) and no compiler runs.
* ``candidate`` without one (its source names none of the compiling APIs): the loaders refuse.
* ``baseline``: nothing changes, and nothing of the candidate's build is ever sent to it.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import torch

from ..build.cache import safe_relative
from ..build.toolchain import ninja_bin_dir
from .ext_loaders import EXT_MODULE, Recorder, Replayer, on_import, refuse_compiling

if TYPE_CHECKING:  # pragma: no cover
    from .child import ChildState

EXT_DIR = "ext"
TRITON_DIR = "triton"


@dataclass
class ExtState:
    """What a sandbox set up for compiled code: ``mode`` is build | replay | refuse | none."""

    mode: str = "none"
    scratch: Optional[Path] = None
    recorder: Optional[Recorder] = None
    #: a staged build between its two requests: the model built by ``import``, what it raised, its seconds
    model: Any = None
    raised: Optional[tuple[str, str, bool]] = None
    seconds: float = 0.0


def prepare_compiled(init: dict, role: str) -> ExtState:
    """Before the arm is imported (and before the tamper snapshot: these are the harness's own patches). Scratch
    folders go to the jail's private ``/tmp``, or without one to ``init["scratch"]`` (the pool's folder, removed when
    the pool closes)."""
    if role == "baseline":
        return ExtState()
    if role == "build":
        scratch = Path(tempfile.mkdtemp(prefix="autotune-build-", dir=init.get("scratch")))
        _triton_env(scratch)
        os.environ["TORCH_EXTENSIONS_DIR"] = str(scratch / "torch_extensions")
        if init.get("max_jobs"):  # ninja's parallel compilers, as the build pool shares the cores (build/pool.py)
            os.environ["MAX_JOBS"] = str(int(init["max_jobs"]))
        _ninja_on_path()
        rec = Recorder(scratch / EXT_DIR)
        on_import(EXT_MODULE, rec.install)
        return ExtState("build", scratch, rec)
    build = init.get("build")
    if build is None:
        on_import(EXT_MODULE, refuse_compiling)
        return ExtState("refuse")
    scratch = Path(tempfile.mkdtemp(prefix="autotune-built-", dir=init.get("scratch")))
    materialize(scratch, build.get("files") or {}, build.get("triton_root"))
    _triton_env(scratch)
    on_import(EXT_MODULE, Replayer(scratch / EXT_DIR, list(build.get("calls") or [])).install)
    return ExtState("replay", scratch)


def _triton_env(scratch: Path) -> None:
    """Triton's cache in the scratch folder, autotuning results kept there too (``TRITON_CACHE_AUTOTUNING``): a
    later sandbox reads the configuration the build stage chose instead of benchmarking again."""
    (scratch / TRITON_DIR).mkdir(exist_ok=True)
    os.environ["TRITON_CACHE_DIR"] = str(scratch / TRITON_DIR)
    os.environ["TRITON_CACHE_AUTOTUNING"] = "1"


def _ninja_on_path() -> None:
    """The ``ninja`` package's binary first on PATH (torch runs ``ninja`` by name; a venv not activated has it in
    its own bin folder only)."""
    bin_dir = ninja_bin_dir()
    if bin_dir and bin_dir not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = bin_dir + os.pathsep + os.environ.get("PATH", "")


def materialize(scratch: Path, files: dict[str, Any], triton_root: Optional[str]) -> None:
    """Write the build's files under ``scratch``, read-only; Triton's group files name their members by absolute
    path, so those move from the build sandbox's folder to this one."""
    for rel, data in files.items():
        path = scratch / safe_relative(rel)
        path.parent.mkdir(parents=True, exist_ok=True)
        raw = data.numpy().tobytes() if isinstance(data, torch.Tensor) else bytes(data)
        if triton_root and path.name.startswith("__grp__"):
            raw = _moved_group(raw, triton_root, str(scratch / TRITON_DIR))
        path.write_bytes(raw)
        path.chmod(0o500 if rel.startswith(EXT_DIR + "/") and not path.suffix else 0o400)


def _moved_group(raw: bytes, old: str, new: str) -> bytes:
    try:
        grp = json.loads(raw)
        children = grp.get("child_paths") or {}
        grp["child_paths"] = {k: new + v[len(old):] if isinstance(v, str) and v.startswith(old) else v
                              for k, v in children.items()}
        return json.dumps(grp).encode()
    except (ValueError, AttributeError):
        return raw


def triton_failure(exc: BaseException) -> bool:
    """Did Triton fail to compile (or to fit) a kernel? Any exception of Triton's own in the chain."""
    seen: set[int] = set()
    e: Optional[BaseException] = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if type(e).__module__.split(".")[0] == "triton":
            return True
        e = e.__cause__ or e.__context__
    return False


def _collect(ext: ExtState, max_bytes: int) -> tuple[dict[str, torch.Tensor], int]:
    """The build's files (each recorded call's object, every file of Triton's cache), as bytes; ({}, total) past
    ``max_bytes``."""
    assert ext.scratch is not None and ext.recorder is not None
    paths = [(f"{EXT_DIR}/{c['file']}", ext.scratch / EXT_DIR / c["file"]) for c in ext.recorder.calls.values()]
    tri = ext.scratch / TRITON_DIR
    paths += [(f"{TRITON_DIR}/{p.relative_to(tri).as_posix()}", p) for p in sorted(tri.rglob("*"))
              if p.is_file() and not p.is_symlink()]
    total = sum(p.stat().st_size for _, p in paths)
    if total > max_bytes:
        return {}, total
    out = {}
    for rel, p in paths:
        data = p.read_bytes()
        out[rel] = torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else torch.empty(0, dtype=torch.uint8)
    return out, total


def h_build(st: ChildState, msg: dict) -> dict:
    """Import the candidate, build ``ModelNew`` (``stage`` "import"), run it once on the problem's inputs (seed from
    the controller; ``stage`` "call"), then answer with what was built; ``stage`` "all" (the default) does both. A
    failed compile is in ``failures`` whether or not the candidate caught it."""
    from ..problems.loader import short_exc

    ext = st.ext
    assert ext.mode == "build" and ext.recorder is not None
    stage = str(msg.get("stage", "all"))
    if stage not in ("import", "call", "all"):
        raise ValueError(f"unknown build stage {stage!r}")
    if stage != "call" or (ext.model is None and ext.raised is None):
        _import_and_build(st)
    if stage == "import":
        return {"imported": ext.raised is None, "seconds": round(ext.seconds, 3)}
    if ext.raised is None:
        t0 = time.perf_counter()
        try:
            inputs = st.inputs({"seed": int(msg["seed"])})
            out = st.call(ext.model, inputs)
            st.device.synchronize()
            del inputs, out
        except Exception as e:  # noqa: BLE001 - the candidate's own error: the gates after the build report it
            ext.raised = (short_exc(e), traceback.format_exc(limit=12), triton_failure(e))
        ext.seconds += time.perf_counter() - t0
    ext.model = None
    raised, trace, triton_failed = ext.raised or (None, "", False)
    files, total = _collect(ext, int(msg.get("max_bytes", 1 << 62)))
    triton = None
    try:
        import triton as _triton  # type: ignore[import-not-found, unused-ignore]

        triton = str(getattr(_triton, "__version__", "?"))
    except ImportError:
        pass
    return {"calls": list(ext.recorder.calls.values()), "failures": ext.recorder.failures, "files": files,
            "bytes": total, "raised": raised, "trace": trace, "triton_failed": triton_failed,
            "triton_root": str(ext.scratch / TRITON_DIR) if ext.scratch else None, "triton": triton,
            "seconds": round(ext.seconds, 3)}


def _import_and_build(st: ChildState) -> None:
    """The candidate imported and its ``ModelNew`` built (where its compilers usually run), kept for the call."""
    from ..problems.loader import load_class, short_exc
    from ..problems.model import SourceFile

    ext = st.ext
    t0 = time.perf_counter()
    try:
        src = st.init["source"]
        st.arm_cls = load_class(SourceFile(Path(src["path"]), src["source"], src["sha256"]),
                                st.init.get("class_name", "ModelNew"), "candidate")
        ext.model = st.model()
    except Exception as e:  # noqa: BLE001 - the candidate's own error: the gates after the build report it
        ext.raised = (short_exc(e), traceback.format_exc(limit=12), triton_failure(e))
    ext.seconds += time.perf_counter() - t0
