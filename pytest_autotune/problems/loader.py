"""Loading KernelBench-format problem and candidate modules from pinned bytes.

Files are compiled from the exact bytes that were hashed (:class:`SourceFile`), never re-read, so what is
measured is what the digest names. Problem files load unchanged: the pytest-autotune extensions
(``AUTOTUNE_SIZES``, ``AUTOTUNE_SHAPE_RANGES``, ``AUTOTUNE_INPUT_DOMAIN``, ``ModelMLX``) are optional.
"""

from __future__ import annotations

import contextlib
import hashlib
import random
import sys
import traceback
import types
from dataclasses import dataclass
from typing import Any, Iterator, Mapping, Optional

from ..errors import ProblemLoadError
from .model import SourceFile

_counter = 0


def seed_everything(seed: int) -> None:
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)


def short_exc(exc: BaseException) -> str:
    """``ValueError: message`` plus the innermost frame in the loaded file, for one-line reasons."""
    tb = traceback.extract_tb(exc.__traceback__)
    where = ""
    if tb:
        last = tb[-1]
        where = f" (at {last.filename}:{last.lineno})"
    msg = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {msg}{where}" if msg else f"{type(exc).__name__}{where}"


def load_module(src: SourceFile, kind: str) -> types.ModuleType:
    """Compile and execute ``src`` as a fresh module. Raises :class:`ProblemLoadError` with the reason."""
    global _counter
    _counter += 1
    digest = hashlib.sha256(str(src.path).encode()).hexdigest()[:10]
    name = f"_autotune_{kind}_{digest}_{_counter}"
    module = types.ModuleType(name)
    module.__file__ = str(src.path)
    try:
        code = compile(src.source, str(src.path), "exec")
    except SyntaxError as e:
        raise ProblemLoadError(str(src.path), f"syntax error at line {e.lineno}: {e.msg}") from None
    except ValueError as e:  # e.g. null bytes
        raise ProblemLoadError(str(src.path), f"cannot compile: {e}") from None
    sys.modules[name] = module
    folder = str(src.path.parent)
    sys.path.insert(0, folder)
    try:
        exec(code, module.__dict__)
    except BaseException as e:  # noqa: BLE001 - a hostile or broken file can raise anything
        sys.modules.pop(name, None)
        if isinstance(e, (KeyboardInterrupt,)):
            raise
        raise ProblemLoadError(str(src.path), f"import failed: {short_exc(e)}") from None
    finally:
        with contextlib.suppress(ValueError):
            sys.path.remove(folder)
    return module


@dataclass
class LoadedProblem:
    """A problem module plus the size handling pytest-autotune adds."""

    src: SourceFile
    module: types.ModuleType

    @classmethod
    def load(cls, src: SourceFile) -> "LoadedProblem":
        module = load_module(src, "problem")
        missing = [n for n in ("Model", "get_inputs", "get_init_inputs") if not callable(getattr(module, n, None))]
        if missing:
            raise ProblemLoadError(
                str(src.path),
                f"not a KernelBench problem: missing {', '.join(missing)} "
                "(a problem defines class Model, get_inputs() and get_init_inputs())",
            )
        return cls(src, module)

    @property
    def name(self) -> str:
        return self.src.path.stem

    # -------------------------------------------------------------------------------- sizes
    def sizes_for(self, device: str) -> dict[str, Any]:
        table = getattr(self.module, "AUTOTUNE_SIZES", None) or {}
        sizes = table.get(device) if isinstance(table, Mapping) else None
        if sizes is None and device == "mlx" and isinstance(table, Mapping):
            sizes = table.get("cpu")
        return dict(sizes or {})

    @property
    def shape_ranges(self) -> dict[str, tuple[int, int]]:
        ranges = getattr(self.module, "AUTOTUNE_SHAPE_RANGES", None) or {}
        return {str(k): (int(v[0]), int(v[1])) for k, v in dict(ranges).items()}

    @property
    def input_domain(self) -> Optional[str]:
        return getattr(self.module, "AUTOTUNE_INPUT_DOMAIN", None)

    @property
    def mlx_model(self) -> Optional[type]:
        return getattr(self.module, "ModelMLX", None)

    @contextlib.contextmanager
    def sizes(self, overrides: Mapping[str, Any]) -> Iterator[None]:
        """Temporarily set the module's size globals."""
        old = {}
        for k, v in overrides.items():
            if not hasattr(self.module, k):
                raise ProblemLoadError(str(self.src.path), f"size override '{k}' names no module global")
            old[k] = getattr(self.module, k)
            setattr(self.module, k, v)
        try:
            yield
        finally:
            for k, v in old.items():
                setattr(self.module, k, v)

    # -------------------------------------------------------------------------------- calls
    def init_inputs(self) -> list:
        try:
            got = self.module.get_init_inputs()
        except Exception as e:  # noqa: BLE001
            raise ProblemLoadError(str(self.src.path), f"get_init_inputs() raised {short_exc(e)}") from None
        if not isinstance(got, (list, tuple)):
            raise ProblemLoadError(
                str(self.src.path), f"get_init_inputs() returned {type(got).__name__}; return a list"
            )
        return list(got)

    def raw_inputs(self, seed: int) -> list:
        seed_everything(seed)
        return self._get_inputs()

    def input_stream(self, seed: int, count: int) -> list[list]:
        """``count`` input sets: ``get_inputs()`` called ``count`` times after one seeding."""
        seed_everything(seed)
        return [self._get_inputs() for _ in range(count)]

    def next_inputs(self) -> list:
        """One more ``get_inputs()`` call, from the generators' current state (inputs.iter_stream)."""
        return self._get_inputs()

    def _get_inputs(self) -> list:
        try:
            got = self.module.get_inputs()
        except Exception as e:  # noqa: BLE001
            if type(e).__name__ == "OutOfMemoryError":
                raise  # the device's memory, not the problem file: the flow reports it with the item's plan
            raise ProblemLoadError(str(self.src.path), f"get_inputs() raised {short_exc(e)}") from None
        if not isinstance(got, (list, tuple)):
            raise ProblemLoadError(str(self.src.path), f"get_inputs() returned {type(got).__name__}; return a list")
        return list(got)

    def build(self, cls: type, init_seed: int, what: str, path: Optional[str] = None):
        """Construct ``cls(*get_init_inputs())`` after seeding with ``init_seed`` (same seed for every arm)."""
        init = self.init_inputs()
        seed_everything(init_seed)
        try:
            return cls(*init)
        except TypeError as e:
            raise ProblemLoadError(
                path or str(self.src.path),
                f"{what} constructor does not take the problem's get_init_inputs() ({len(init)} args): {e}",
            ) from None
        except Exception as e:  # noqa: BLE001
            raise ProblemLoadError(path or str(self.src.path), f"{what} constructor raised {short_exc(e)}") from None

    def build_reference(self, init_seed: int):
        return self.build(self.module.Model, init_seed, "Model")


def load_class(src: SourceFile, class_name: str, kind: str) -> type:
    module = load_module(src, kind)
    cls = getattr(module, class_name, None)
    if not isinstance(cls, type):
        raise ProblemLoadError(str(src.path), f"defines no class {class_name} (a {kind} file must define {class_name})")
    return cls
