"""Provenance: a registry of typed keys (pyperf-style) and their collection for a run and for each item.

Keys are contributed through the ``pytest_autotune_provenance_keys`` hook (the built-in ones below are an
implementation of it). A *required* key that cannot be collected makes the run or the result unrecordable.

A result says how it was measured: the environment variables that change a measurement (``MEASUREMENT_ENV``: the
timing budget's scale, the GPU a process sees, the jail, what the sandboxes inherit that changes how code runs) are
recorded with every run (``environment``, ``budget_scale``; docs/reference/environment.md).
"""

from __future__ import annotations

import hashlib
import os
import platform
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Literal, Mapping, Optional

from . import __version__
from .errors import AutotuneUsageError

Scope = Literal["run", "item"]


@dataclass(frozen=True)
class ProvenanceKey:
    name: str
    scope: Scope
    type: type
    description: str
    collect: Callable[[Mapping[str, Any]], Any]  # receives the collection context (run or item facts)
    required: bool = True


class ProvenanceError(Exception):
    pass


def collect(keys: list[ProvenanceKey], scope: Scope, context: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in keys:
        if key.scope != scope:
            continue
        try:
            value = key.collect(context)
        except Exception as e:  # noqa: BLE001
            if key.required:
                raise ProvenanceError(f"provenance key '{key.name}' could not be collected: {e}") from e
            value = None
        if value is None and key.required:
            raise ProvenanceError(f"provenance key '{key.name}' is required but has no value ({key.description})")
        if value is not None and not isinstance(value, key.type):
            raise ProvenanceError(
                f"provenance key '{key.name}' must be {key.type.__name__}, got {type(value).__name__}")
        out[key.name] = value
    return out


# ------------------------------------------------------------------------------------------ facts

#: PYTEST_AUTOTUNE_BUDGET_SCALE multiplies every item's timing budget ([timing].item_budget_s)
BUDGET_SCALE_ENV = "PYTEST_AUTOTUNE_BUDGET_SCALE"
#: variables that change a measurement, recorded in every run's provenance where set: the plugin's own (the budget's
#: scale, the jail's emulation), the GPU a process sees, and what the sandboxes inherit that changes how code runs
#: (which libraries load, BLAS's kernel choice, compiled-kernel caches, CUDA/ROCm/MLX settings, NVLink multicast)
MEASUREMENT_ENV = (BUDGET_SCALE_ENV, "AUTOTUNE_JAIL_EMULATE", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER",
                   "LD_LIBRARY_PATH", "DYLD_LIBRARY_PATH", "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE",
                   "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST",
                   "NVSHMEM_DISABLE_NVLS")
MEASUREMENT_ENV_PREFIXES = ("CUDA_", "NVIDIA_", "HIP_", "MLX_")


def measurement_environment(environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The variables of ``environ`` that change a measurement (MEASUREMENT_ENV, MEASUREMENT_ENV_PREFIXES)."""
    return {k: v for k, v in sorted(environ.items())
            if k in MEASUREMENT_ENV or k.startswith(MEASUREMENT_ENV_PREFIXES)}


def budget_scale(environ: Mapping[str, str] = os.environ) -> float:
    """PYTEST_AUTOTUNE_BUDGET_SCALE: the factor on every item's timing budget (1 when unset or empty)."""
    raw = environ.get(BUDGET_SCALE_ENV, "").strip()
    if not raw:
        return 1.0
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not (value > 0 and value < float("inf")):
        raise AutotuneUsageError(f"{BUDGET_SCALE_ENV}={raw!r} is not a positive number: set it to the factor on every "
                                 f"item's timing budget (0.5 halves it, 2 doubles it) or unset it")
    return value



def git_state(root: Path) -> tuple[Optional[str], Optional[bool]]:
    """(sha, dirty) of the repository holding ``root``; (None, None) outside git."""
    try:
        sha = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=10)
        if sha.returncode != 0:
            return None, None
        status = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                                capture_output=True, text=True, timeout=30)
        return sha.stdout.strip(), bool(status.stdout.strip())
    except (OSError, subprocess.SubprocessError):
        return None, None


#: the parts of the harness whose code decides a verdict or a number
HARNESS_PARTS = ("gates", "sandbox", "measure", "problems", "store", "protocol.py", "protocol_registry.py",
                 "seeds.py", "flow.py", "result.py")


def harness_sha256() -> str:
    """Digest of the plugin's own gate/sandbox/measurement/store code (sorted relative paths + bytes)."""
    root = Path(__file__).resolve().parent
    h = hashlib.sha256()
    files: list[Path] = []
    for part in HARNESS_PARTS:
        p = root / part
        if p.is_dir():
            files += sorted(x for x in p.rglob("*.py") if "__pycache__" not in x.parts)
        elif p.is_file():
            files.append(p)
    for f in sorted(files):
        h.update(str(f.relative_to(root)).encode() + b"\0")
        h.update(f.read_bytes() + b"\0")
    return h.hexdigest()


def module_version(name: str) -> Optional[str]:
    try:
        mod = __import__(name)
    except ImportError:
        return None
    return getattr(mod, "__version__", None)


def mlx_version() -> Optional[str]:
    try:
        from importlib.metadata import version

        import mlx.core as mx  # noqa: F401

        return version("mlx")
    except Exception:  # noqa: BLE001
        return None


def _ctx(key: str) -> Callable[[Mapping[str, Any]], Any]:
    return lambda c: c.get(key)


def builtin_keys() -> list[ProvenanceKey]:
    return [
        ProvenanceKey("protocol_sha256", "run", str, "sha256 of protocol.toml's bytes", _ctx("protocol_sha256")),
        ProvenanceKey("protocol_version", "run", str, "[protocol].version", _ctx("protocol_version")),
        ProvenanceKey("protocol_frozen", "run", bool, "digest equals the one pinned for the version",
                      _ctx("protocol_frozen")),
        ProvenanceKey("git_sha", "run", str, "HEAD of the rootdir's repository", _ctx("git_sha"), required=False),
        ProvenanceKey("git_dirty", "run", bool, "tracked files modified", _ctx("git_dirty"), required=False),
        ProvenanceKey("harness_version", "run", str, "pytest-autotune version", lambda c: __version__),
        ProvenanceKey("harness_sha256", "run", str, "digest of the plugin's gate/sandbox/measure/store code",
                      lambda c: c.get("harness_sha256") or harness_sha256()),
        ProvenanceKey("python_version", "run", str, "interpreter", lambda c: platform.python_version()),
        ProvenanceKey("python_implementation", "run", str, "interpreter implementation",
                      lambda c: platform.python_implementation()),
        ProvenanceKey("torch_version", "run", str, "torch.__version__", lambda c: module_version("torch")),
        ProvenanceKey("numpy_version", "run", str, "numpy.__version__", lambda c: module_version("numpy")),
        ProvenanceKey("mlx_version", "run", str, "mlx version (if installed)", lambda c: mlx_version(),
                      required=False),
        ProvenanceKey("host", "run", str, "host name", lambda c: socket.gethostname()),
        ProvenanceKey("platform", "run", str, "OS and machine", lambda c: platform.platform()),
        ProvenanceKey("device", "run", str, "--device", _ctx("device")),
        ProvenanceKey("device_fingerprint", "run", dict, "device model, clocks, memory, driver",
                      _ctx("device_fingerprint")),
        ProvenanceKey("nonce_sha256", "run", str, "commitment to the run's nonce (revealed at the end)",
                      _ctx("nonce_sha256")),
        ProvenanceKey("cpu_threads", "run", int, "threads per sandbox ([timing].cpu_threads)", _ctx("cpu_threads")),
        ProvenanceKey("argv", "run", list, "command line", lambda c: list(sys.argv)),
        ProvenanceKey("modification_surface", "run", dict, "--autotune-base check: changed files, outside files",
                      _ctx("modification_surface"), required=False),
        ProvenanceKey("pid", "run", int, "controller process id", lambda c: os.getpid()),
        ProvenanceKey("budget_scale", "run", float, f"{BUDGET_SCALE_ENV}: the factor on every item's timing budget",
                      lambda c: budget_scale()),
        ProvenanceKey("environment", "run", dict, "the environment variables that change a measurement, where set "
                      "(MEASUREMENT_ENV)", lambda c: measurement_environment()),
        ProvenanceKey("process_pairs", "run", int, "--autotune-pairs: pairs of processes per item instead of the "
                      "protocol's (absent: the protocol's)", _ctx("process_pairs"), required=False),
        ProvenanceKey("max_pairs", "run", int, "--autotune-max-pairs: an item's pairs of processes at most, each "
                      "item stopping once its CI reaches the target (absent: off)", _ctx("max_pairs"),
                      required=False),
        ProvenanceKey("strict_contract", "run", bool, "--autotune-strict-contract: a wrong answer beyond the "
                      "problem's contract refused the item (absent: findings, as [contract].beyond says)",
                      _ctx("strict_contract"), required=False),
        # item scope
        ProvenanceKey("problem_sha256", "item", str, "digest of the problem file", _ctx("problem_sha256")),
        ProvenanceKey("candidate_sha256", "item", str, "digest of the candidate file", _ctx("candidate_sha256")),
        ProvenanceKey("baseline_sha256", "item", str, "digest of the strongest baseline's file",
                      _ctx("baseline_sha256")),
        ProvenanceKey("seeds", "item", list, "paired correctness seeds", _ctx("seeds")),
        ProvenanceKey("sizes", "item", dict, "problem size overrides for the device", _ctx("sizes")),
        ProvenanceKey("sandbox_pid", "item", int, "process that ran the candidate", _ctx("sandbox_pid"),
                      required=False),
        ProvenanceKey("device_index", "item", int, "index of the device the item was measured on (xdist workers "
                      "on a multi-GPU host each own one)", _ctx("device_index"), required=False),
        ProvenanceKey("device_uuid", "item", str, "the measuring device's own id where it has one (a GPU's UUID): "
                      "which GPU an xdist worker timed on", _ctx("device_uuid"), required=False),
        ProvenanceKey("worker", "item", str, "the xdist worker that measured it (gwN)", _ctx("worker"), required=False),
        ProvenanceKey("host", "item", str, "host that measured the item (remote xdist workers)",
                      lambda c: socket.gethostname()),
    ]
