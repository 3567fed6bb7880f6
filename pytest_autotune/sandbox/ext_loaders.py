"""``torch.utils.cpp_extension.load_inline`` and ``load`` as a candidate's sandbox sees them (docs/guide/
compiled-candidates.md, "What the build stage allows").

An item's extensions are compiled once, in its build sandbox; every other sandbox of the item loads what was built
there and runs no compiler. Both sides replace the two loaders before the candidate is imported:

* :class:`Recorder` (the build sandbox) calls torch's own loader, each call into a build directory of its own in the
  sandbox's private scratch folder, and keeps what it built and what failed (the compiler's whole output);
* :class:`Replayer` (the item's correctness, probe and timing sandboxes) answers each call with the object the build
  stage produced for the same call (name, sources, flags: :func:`call_key`), copied into the sandbox's scratch
  folder by the harness before the candidate ran, and refuses a call the build stage did not see;
* :func:`refuse_compiling` (a candidate that had no build stage: its source never names ``cpp_extension``,
  ``load_inline`` or ``triton``) refuses every call, naming why.

In every non-build sandbox torch's compiling internals (``_jit_compile`` and the ninja helpers) refuse too, so that a
candidate reaching past the two loaders gets the same answer. A candidate that starts a compiler by other means
(``subprocess``) only spends its own sandbox's time and CPU, which the timing and integrity gates account for.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.util
import inspect
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable

EXT_MODULE = "torch.utils.cpp_extension"
LOADERS = ("load_inline", "load")
#: torch's compiling internals: refused outside the build stage (a candidate reaching past the two loaders)
INTERNALS = ("_jit_compile", "_write_ninja_file_and_build_library", "_run_ninja_build", "_build_extension_module",
             "_write_ninja_file_and_compile_objects")
#: arguments that do not change what is built (where it is built, how loudly)
_IGNORED = ("build_directory", "verbose", "keep_intermediates")


def _text(v: Any) -> Any:
    if isinstance(v, (list, tuple)):
        return [_text(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _text(x) for k, x in sorted(v.items(), key=lambda kv: str(kv[0]))}
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    return repr(v)


def _source_files(paths: Any) -> list[list[Any]]:
    """``load``'s sources by content (a file the candidate wrote at import has another path in every sandbox)."""
    out: list[list[Any]] = []
    for p in [paths] if isinstance(paths, (str, os.PathLike)) else list(paths or []):
        try:
            data = Path(p).read_bytes()
            out.append([Path(p).name, hashlib.sha256(data).hexdigest()])
        except OSError:
            out.append([str(p), None])
    return out


def call_key(fn: str, arguments: dict) -> str:
    """What identifies one loader call across the sandboxes of an item: the loader, every argument that changes
    what is built (sources by content, flags, functions), canonical JSON, sha256."""
    d = {k: v for k, v in arguments.items() if k not in _IGNORED}
    if fn == "load":
        d["sources"] = _source_files(d.get("sources"))
    for k in ("cpp_sources", "cuda_sources", "sycl_sources"):
        if isinstance(d.get(k), str):
            d[k] = [d[k]]
    return hashlib.sha256(json.dumps({"fn": fn, "args": _text(d)}, sort_keys=True).encode()).hexdigest()


def _bind(real: Callable, args: tuple, kwargs: dict) -> dict:
    bound = inspect.signature(real).bind(*args, **kwargs)
    bound.apply_defaults()
    return dict(bound.arguments)


def _kind(arguments: dict) -> str:
    if arguments.get("is_standalone"):
        return "executable"
    return "module" if arguments.get("is_python_module", True) else "library"


class Recorder:
    """The build sandbox's loaders: torch's own, each call built in ``root/<call key>``; what was built
    (:attr:`calls`) and what failed (:attr:`failures`, with the compiler's output) are the build stage's answer."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.calls: dict[str, dict] = {}
        self.failures: list[dict] = []
        self._results: dict[str, Any] = {}

    def install(self, ext: Any) -> None:
        for fn in LOADERS:
            real = getattr(ext, fn)
            setattr(ext, fn, self._wrap(fn, real))

    def _wrap(self, fn: str, real: Callable) -> Callable:
        def loader(*args: Any, **kwargs: Any) -> Any:
            arguments = _bind(real, args, kwargs)
            key = call_key(fn, arguments)
            if key in self._results:  # a second model instance, the same call: what the first one got
                return self._results[key]
            folder = self.root / key[:24]
            folder.mkdir(parents=True, exist_ok=True)
            arguments.update(build_directory=str(folder), verbose=False)
            t0 = time.perf_counter()
            try:
                result = real(**arguments)
            except Exception as e:
                self.failures.append({"call": key, "fn": fn, "name": str(arguments.get("name")),
                                      "seconds": round(time.perf_counter() - t0, 3),
                                      "error": f"{type(e).__name__}: {e}"})
                raise
            kind = _kind(arguments)
            path = Path(result.__file__ if kind == "module" else result)
            self.calls[key] = {"call": key, "fn": fn, "name": str(arguments.get("name")), "kind": kind,
                               "module": path.stem if kind == "module" else None,
                               "file": str(path.relative_to(self.root)), "seconds": round(time.perf_counter() - t0, 3),
                               "flags": [str(f) for k in ("extra_cflags", "extra_cuda_cflags", "extra_ldflags")
                                         for f in (arguments.get(k) or [])],
                               "cuda": bool(arguments.get("cuda_sources")) or bool(arguments.get("with_cuda"))}
            self._results[key] = result
            return result

        loader.__name__ = loader.__qualname__ = fn
        loader.__doc__ = getattr(real, "__doc__", None)
        return loader


class Replayer:
    """A later sandbox's loaders: each call answered with what the build stage built for it, from ``root`` (the
    sandbox's copy of the build); a call the build stage did not see is refused."""

    def __init__(self, root: Path, calls: list[dict]) -> None:
        self.root = root
        self.calls = {c["call"]: c for c in calls}
        self._loaded: dict[str, Any] = {}

    def install(self, ext: Any) -> None:
        for fn in LOADERS:
            setattr(ext, fn, self._wrap(fn, getattr(ext, fn)))
        refuse_internals(ext, "compiling outside the build stage is refused: the item's extensions were built "
                              "once, before correctness; call load_inline/load, which load that build")

    def _wrap(self, fn: str, real: Callable) -> Callable:
        def loader(*args: Any, **kwargs: Any) -> Any:
            arguments = _bind(real, args, kwargs)
            key = call_key(fn, arguments)
            if key in self._loaded:
                return self._loaded[key]
            entry = self.calls.get(key)
            if entry is None:
                seen = ", ".join(sorted({repr(c["name"]) for c in self.calls.values()})) or "none"
                raise RuntimeError(
                    f"{fn}({arguments.get('name')!r}) was not built in the build stage (it built: {seen}): no "
                    "compiler runs after it. Make every call the same in every process (no random or time-dependent "
                    "sources, names or flags), and make it while the module is imported, the model is built or it "
                    "first runs on the problem's inputs")
            self._loaded[key] = result = load_built(self.root / entry["file"], entry)
            return result

        loader.__name__ = loader.__qualname__ = fn
        loader.__doc__ = getattr(real, "__doc__", None)
        return loader


def load_built(path: Path, entry: dict) -> Any:
    """What torch's loader returns for a built object: the imported module, the library's path (loaded into
    ``torch.ops``), or the executable's path."""
    kind = entry.get("kind")
    if kind == "module":
        spec = importlib.util.spec_from_file_location(str(entry["module"]), str(path))
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot load the built extension {path}")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    if kind == "library":
        import torch

        torch.ops.load_library(str(path))
        return str(path)
    return str(path)


def refuse_internals(ext: Any, why: str) -> None:
    for name in INTERNALS:
        if hasattr(ext, name):
            setattr(ext, name, _refusing(name, why))


def _refusing(name: str, why: str) -> Callable:
    def refused(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"torch.utils.cpp_extension.{name}: {why}")

    refused.__name__ = refused.__qualname__ = name
    return refused


NOT_BUILT = ("this candidate had no build stage: its source names none of cpp_extension, load_inline, triton, so "
             "nothing was compiled for it and no compiler runs in its sandboxes; import the loader by name "
             "(from torch.utils.cpp_extension import load_inline)")


def refuse_compiling(ext: Any) -> None:
    """Every loader and compiling internal of ``ext`` refuses (a candidate that had no build stage)."""
    for fn in LOADERS:
        setattr(ext, fn, _refusing(fn, NOT_BUILT))
    refuse_internals(ext, NOT_BUILT)


class _PatchOnImport(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Runs ``patch`` on module ``name`` right after each import of it (the other finders find it; a re-import
    after ``del sys.modules[name]`` is patched too): plain candidates never pay for importing
    ``torch.utils.cpp_extension`` (setuptools: ~0.1 s)."""

    def __init__(self, name: str, patch: Callable[[Any], None]) -> None:
        self.name = name
        self.patch = patch

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != self.name:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _Patching(spec.loader, self.patch)
                return spec
        return None


class _Patching(importlib.abc.Loader):
    def __init__(self, loader: Any, patch: Callable[[Any], None]) -> None:
        self.loader = loader
        self.patch = patch

    def create_module(self, spec: Any) -> Any:
        return self.loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self.loader.exec_module(module)
        self.patch(module)


def on_import(name: str, patch: Callable[[Any], None]) -> None:
    """``patch(module)`` now if ``name`` is imported, else right after its first import."""
    if name in sys.modules:
        patch(sys.modules[name])
    else:
        sys.meta_path.insert(0, _PatchOnImport(name, patch))


__all__ = ["Recorder", "Replayer", "call_key", "load_built", "on_import", "refuse_compiling", "EXT_MODULE"]
