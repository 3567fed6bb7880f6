"""Tamper snapshots: the identity of every object a measurement relies on, taken before a candidate is imported
and compared after import and after each phase.

A candidate runs in the same process as the sandbox's own code, so it can patch clocks, comparison functions or
the torch namespace the reference uses (to make itself look fast, or the baseline slow). Replacing an attribute
changes the object bound to its name; that is what this catches. Patches below Python (ctypes writes into
native code) are out of its reach — the controller's own clock and the clean-process baseline catch their
effects (docs/threat-model.md).
"""

from __future__ import annotations

import builtins
import gc
import math
import os
import sys
import threading
import time
from typing import Any, Iterable

_NAMESPACE_MODULES = (
    "torch",
    "torch.nn.functional",
    "torch.linalg",
    "torch.fft",
    "torch.special",
    "torch.testing",
    "torch.cuda",
    "torch.backends.cuda",
    "torch.backends.cudnn",
    "numpy",
    "numpy.linalg",
    "time",
    "math",
    "gc",
    "threading",
    "os",
    "builtins",
    "pickle",
    "json",
    "select",
    "socket",
)
_NAMESPACE_CLASSES = ("torch.Tensor", "torch.nn.Module", "torch.nn.Linear", "torch.nn.Conv2d", "numpy.ndarray",
                      "socket.socket")


def _resolve(dotted: str) -> Any:
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        mod = sys.modules.get(".".join(parts[:i]))
        if mod is not None:
            obj = mod
            for p in parts[i:]:
                obj = getattr(obj, p, None)
                if obj is None:
                    return None
            return obj
    return None


class TamperSnapshot:
    """name → object, compared by identity (``is``)."""

    def __init__(self, objects: dict[str, Any]) -> None:
        self.objects = objects

    @classmethod
    def take(cls, extra: dict[str, Any] | None = None, watched_modules: Iterable[Any] = ()) -> "TamperSnapshot":
        objs: dict[str, Any] = {}
        for name in _NAMESPACE_MODULES:
            mod = sys.modules.get(name)
            if mod is None:
                continue
            for k, v in list(vars(mod).items()):
                if k in ("__loader__", "__spec__", "__builtins__", "__cached__"):
                    continue
                objs[f"{name}.{k}"] = v
        for name in _NAMESPACE_CLASSES:
            klass = _resolve(name)
            if klass is None:
                continue
            for k, v in list(vars(klass).items()):
                objs[f"{name}.{k}"] = v
        for mod in watched_modules:
            mname = getattr(mod, "__name__", repr(mod))
            for k, v in list(vars(mod).items()):
                if k.startswith("__"):
                    continue
                objs[f"{mname}.{k}"] = v
                if isinstance(v, type):
                    for kk, vv in list(vars(v).items()):
                        if not kk.startswith("__") or kk in ("__call__", "__init__"):
                            objs[f"{mname}.{k}.{kk}"] = vv
        for k, v in (extra or {}).items():
            objs[f"timer:{k}"] = v
        return cls(objs)

    def changes(self, current: "TamperSnapshot") -> list[str]:
        """Names whose object was replaced or removed (additions are allowed: lazy submodules add names)."""
        out = []
        for name, obj in self.objects.items():
            if name not in current.objects:
                out.append(f"{name} (removed)")
            elif current.objects[name] is not obj and not _same_value(obj, current.objects[name]):
                out.append(name)
        return sorted(out)


def _same_value(a: Any, b: Any) -> bool:
    # plain immutable values that are legitimately re-created (ints, strs, bools) are compared by value
    if type(a) is type(b) and isinstance(a, (int, float, str, bytes, bool, type(None), tuple, frozenset)):
        try:
            return bool(a == b) or (isinstance(a, float) and math.isnan(a) and math.isnan(b))
        except Exception:  # noqa: BLE001
            return False
    return False


def os_thread_count() -> int:
    """Threads of this process as the OS sees them (native threads included, not only Python's)."""
    try:
        with open(f"/proc/{os.getpid()}/status") as f:
            for line in f:
                if line.startswith("Threads:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return threading.active_count()


__all__ = ["TamperSnapshot", "os_thread_count", "builtins", "gc", "time"]
