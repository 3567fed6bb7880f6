"""The environment every sandbox process starts with: scrubbed of pytest's and the plugin's variables (no
database path, no run secrets), with the protocol's thread count in every threading library's variable."""

from __future__ import annotations

import os
from typing import Optional

_KEEP_ENV = (
    "PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR", "TEMP", "TMP", "USER", "LOGNAME", "SHELL",
    "LD_LIBRARY_PATH", "DYLD_LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH", "TRITON_CACHE_DIR", "TORCH_HOME",
    "TORCHINDUCTOR_CACHE_DIR", "CC", "CXX", "SYSTEMROOT", "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE",
    "VIRTUAL_ENV", "NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS",
)
_KEEP_PREFIXES = ("CUDA_", "NVIDIA_", "HIP_", "MLX_")
#: ... and inductor's compile workers (one: torch.compile compiles in the sandbox's own process, no worker pool)
_THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "VECLIB_MAXIMUM_THREADS",
                "NUMEXPR_NUM_THREADS", "BLIS_NUM_THREADS", "TORCHINDUCTOR_COMPILE_THREADS")


def sandbox_env(threads: int, extra: Optional[dict[str, str]] = None) -> dict[str, str]:
    """A scrubbed environment: nothing of pytest's or ours (no database path, no run secrets)."""
    env = {k: v for k, v in os.environ.items() if k in _KEEP_ENV or k.startswith(_KEEP_PREFIXES)}
    for k in _THREAD_VARS:
        env[k] = str(threads)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PYTHONHASHSEED"] = "0"
    env.update(extra or {})
    return env


def no_progress_monitor() -> None:
    """tqdm's first progress bar (torch.compile draws one; an explicit ``disable=False`` beats TQDM_DISABLE) starts a
    monitor thread that outlives the call, which the correctness gate must count as a thread left running. With
    its interval at 0 tqdm starts none. Set once here, before any candidate exists; a candidate that sets it back
    starts its own thread and is refused for it."""
    import importlib

    try:
        tqdm = importlib.import_module("tqdm")  # by name: optional, and it ships no type stubs
    except ImportError:
        return
    tqdm.tqdm.monitor_interval = 0
