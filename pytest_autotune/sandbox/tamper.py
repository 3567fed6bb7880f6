"""Tamper snapshots: the identity of every object a measurement relies on, taken before a candidate is imported
and compared after import and after each phase.

A candidate runs in the same process as the sandbox's own code, so it can patch clocks, comparison functions or
the torch namespace the reference uses (to make itself look fast, or the baseline slow). Replacing an attribute
changes the object bound to its name; that is what this catches. Patches below Python (ctypes writes into
native code) are out of its reach — the controller's own clock and the clean-process baseline catch their
effects (docs/design/threat-model.md).
"""

from __future__ import annotations

import builtins
import gc
import math
import os
import signal
import sys
import threading
import time
import types
from typing import Any, Callable, Iterable

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


def _torch_attr(dotted: str) -> Callable[[], Any]:
    def get() -> Any:
        obj: Any = sys.modules["torch"]
        for part in dotted.split("."):
            obj = getattr(obj, part)
        return obj

    return get


#: process-wide settings that change how fast (or how precisely) code runs without replacing any name;
#: compared by value. A candidate may not change them: e.g. a profile hook that stalls only the baseline, more
#: intra-op threads than the protocol's, a lower float32 matmul precision, or pinning itself to other CPUs.
_SETTINGS: dict[str, Callable[[], Any]] = {
    "sys.getprofile()": sys.getprofile,
    "sys.gettrace()": sys.gettrace,
    "sys.getswitchinterval()": sys.getswitchinterval,
    "torch.get_num_threads()": lambda: sys.modules["torch"].get_num_threads(),
    "torch.get_default_dtype()": lambda: sys.modules["torch"].get_default_dtype(),
    "torch.get_float32_matmul_precision()": lambda: sys.modules["torch"].get_float32_matmul_precision(),
    "torch.are_deterministic_algorithms_enabled()":
        lambda: sys.modules["torch"].are_deterministic_algorithms_enabled(),
    "torch.backends.cuda.matmul.allow_tf32": _torch_attr("backends.cuda.matmul.allow_tf32"),
    "torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction":
        _torch_attr("backends.cuda.matmul.allow_fp16_reduced_precision_reduction"),
    "torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction":
        _torch_attr("backends.cuda.matmul.allow_bf16_reduced_precision_reduction"),
    "torch.backends.cudnn.allow_tf32": _torch_attr("backends.cudnn.allow_tf32"),
    "torch.backends.cudnn.benchmark": _torch_attr("backends.cudnn.benchmark"),
    "os.getpriority(PRIO_PROCESS, 0)": lambda: os.getpriority(os.PRIO_PROCESS, 0),
    "os.sched_getscheduler(0)": lambda: os.sched_getscheduler(0),
}


def _signal_handlers() -> tuple:
    out = []
    for sig in sorted(signal.valid_signals()):
        try:
            out.append((int(sig), signal.getsignal(sig)))
        except (OSError, ValueError):  # SIGKILL/SIGSTOP and friends have no handler
            continue
    return tuple(out)


def _interval_timers() -> tuple:
    """Armed or not, and the interval, of each interval timer (the remaining time changes by itself)."""
    return tuple((bool(signal.getitimer(w)[0]), signal.getitimer(w)[1])
                 for w in (signal.ITIMER_REAL, signal.ITIMER_VIRTUAL, signal.ITIMER_PROF))


def _mode_stacks() -> tuple:
    torch = sys.modules["torch"]
    return (int(torch._C._len_torch_function_stack()), int(torch._C._len_torch_dispatch_stack()))


def _cuda_allocator() -> Any:
    torch = sys.modules["torch"]
    if not torch.cuda.is_initialized():
        return None
    return torch.cuda.memory.get_allocator_backend()


# Code that runs between the candidate's calls -- while the harness builds inputs, reads outputs or waits -- is
# the candidate's work moved out of its timed window (docs/architecture.md#no-candidate-code-outside-its-calls). Every way to schedule such code that Python exposes is watched here: signal handlers and interval
# timers, garbage-collector callbacks and state, profile/trace hooks (sys and threading), torch function and
# dispatch modes left pushed, and the CUDA allocator backend. (atexit handlers never run: sandboxes leave with
# os._exit. Import hooks never run: the harness imports nothing after the candidate loads. CPU affinity is checked by
# the controller itself, from the kernel, before every sample: measure/schedule.py.)
_SETTINGS.update({
    "signal handlers": _signal_handlers,
    "signal interval timers": _interval_timers,
    "gc.callbacks": lambda: tuple(gc.callbacks),
    "gc.isenabled()": gc.isenabled,
    "gc.get_threshold()": gc.get_threshold,
    "threading.getprofile()": threading.getprofile,
    "threading.gettrace()": threading.gettrace,
    "torch mode stacks (function, dispatch)": _mode_stacks,
    "torch.cuda allocator backend": _cuda_allocator,
    "torch.get_num_interop_threads()": lambda: sys.modules["torch"].get_num_interop_threads(),
    "torch.backends.mkldnn.enabled": _torch_attr("backends.mkldnn.enabled"),
})


def _resolve(dotted: str) -> Any:
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        mod = sys.modules.get(".".join(parts[:i]))
        if mod is not None:
            obj: Any = mod
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
                if isinstance(v, dict) and len(v) <= 256:  # dispatch tables (e.g. the sandbox's HANDLERS)
                    for kk, vv in list(v.items()):
                        objs[f"{mname}.{k}[{kk!r}]"] = vv
                if isinstance(v, type):
                    for kk, vv in list(vars(v).items()):
                        if not kk.startswith("__") or kk in ("__call__", "__init__"):
                            objs[f"{mname}.{k}.{kk}"] = vv
        for k, v in (extra or {}).items():
            objs[f"timer:{k}"] = v
        # a function can be changed without replacing it: its code, defaults and closure cells are attributes
        function, wrappers = types.FunctionType, (staticmethod, classmethod)
        for name, v in list(objs.items()):
            if isinstance(v, wrappers):
                v = v.__func__
            if type(v) is not function:
                continue
            objs[name + ".__code__"] = v.__code__
            if v.__defaults__ is not None:
                objs[name + ".__defaults__"] = v.__defaults__
            if v.__kwdefaults__ is not None:
                objs[name + ".__kwdefaults__"] = v.__kwdefaults__
            if v.__closure__:
                for i, cell in enumerate(v.__closure__):
                    try:
                        objs[f"{name}.__closure__[{i}]"] = cell.cell_contents
                    except ValueError:  # an empty cell
                        pass
        for k, get in _SETTINGS.items():
            try:
                objs[f"setting:{k}"] = get()
            except Exception:  # noqa: BLE001 - a setting this build does not have
                pass
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
    """Threads of this process as the OS sees them (native threads included, not only Python's): field 20 of
    /proc/self/stat (short and fixed-format, so cheap enough to read around every sample)."""
    try:
        with open("/proc/self/stat", "rb") as f:
            stat = f.read()
        return int(stat[stat.rfind(b")") + 2:].split()[17])
    except (OSError, ValueError, IndexError):
        return threading.active_count()


__all__ = ["TamperSnapshot", "os_thread_count", "builtins", "gc", "time"]
