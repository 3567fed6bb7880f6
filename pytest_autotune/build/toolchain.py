"""What a build depends on besides the candidate's source: torch, the compilers and their versions, the variables
that change their flags, the device's architecture -- and the cache key made of them (docs/guide/
compiled-candidates.md, "What is cached").

Read in the controller, once per process: the compilers a build sandbox runs are the same binaries (the jail's view
is the host's file system, read-only).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import shutil
import subprocess
from typing import Any, Optional

from ..hostinfo import cpuinfo

#: the layout of a cache entry and of what a build sandbox answers; a change makes every older entry a miss
BUILD_FORMAT = 1
#: variables that change what torch's loaders and Triton build
ENV_KEYS = ("CXX", "CC", "CFLAGS", "CXXFLAGS", "LDFLAGS", "CPPFLAGS", "CUDA_HOME", "CUDA_PATH", "TORCH_CUDA_ARCH_LIST",
            "TORCH_DONT_CHECK_COMPILER_ABI", "TRITON_PTXAS_PATH", "TRITON_LIBDEVICE_PATH")


def _version_line(cmd: list[str], last: bool = False) -> str:
    """The first (or last) non-empty line ``cmd`` prints, or why there is none."""
    exe = shutil.which(cmd[0]) or cmd[0]
    try:
        out = subprocess.run([exe, *cmd[1:]], capture_output=True, text=True, timeout=30, check=False,
                             stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"missing ({cmd[0]}: {type(e).__name__})"
    lines = [ln.strip() for ln in (out.stdout or out.stderr).splitlines() if ln.strip()]
    if not lines:
        return f"missing ({cmd[0]} printed nothing, exit {out.returncode})"
    return lines[-1] if last else lines[0]


def ninja_bin_dir() -> Optional[str]:
    """The folder of the ``ninja`` package's binary (a dependency of the project); None without the package."""
    try:
        import ninja  # type: ignore[import-not-found, import-untyped, unused-ignore]
    except ImportError:
        return None
    return str(getattr(ninja, "BIN_DIR", "") or "") or None


def ninja_binary() -> str:
    """The ``ninja`` package's binary, else whatever ``ninja`` is on PATH."""
    bin_dir = ninja_bin_dir()
    if bin_dir and os.path.exists(os.path.join(bin_dir, "ninja")):
        return os.path.join(bin_dir, "ninja")
    return "ninja"


def _cpu_arch() -> str:
    """The CPU's model and feature flags (``-march=native`` builds for exactly these), as a short digest."""
    info = cpuinfo()
    model = info.get("model name") or platform.processor() or platform.machine()
    flags = info.get("flags") or info.get("Features") or ""
    return f"{platform.machine()} {model} flags:{hashlib.sha256(flags.encode()).hexdigest()[:12]}"


def device_arch(device_name: str, fingerprint: dict[str, Any]) -> str:
    if device_name == "cuda":
        return f"{fingerprint.get('name')} sm {fingerprint.get('capability')}"
    return _cpu_arch()


@functools.lru_cache(maxsize=4)
def toolchain(device_name: str, arch: str) -> tuple[tuple[str, str], ...]:
    """(name, version) of everything a build on ``device_name`` depends on besides the candidate."""
    import torch

    tc = {"python": platform.python_version(), "torch": str(torch.__version__), "arch": arch,
          "cxx": _version_line([os.environ.get("CXX", "c++"), "--version"]),
          "ninja": _version_line([ninja_binary(), "--version"])}
    if device_name == "cuda":
        from torch.utils.cpp_extension import CUDA_HOME

        tc["torch_cuda"] = str(torch.version.cuda)
        nvcc = os.path.join(CUDA_HOME, "bin", "nvcc") if CUDA_HOME else "nvcc"
        tc["nvcc"] = _version_line([nvcc, "--version"], last=True)
        tc["triton"] = _dist_version("triton")
    env = {k: os.environ[k] for k in ENV_KEYS if k in os.environ}
    if env:
        tc["env"] = json.dumps(env, sort_keys=True)
    return tuple(sorted(tc.items()))


def _dist_version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return "not installed"


def build_key(candidate_sha256: str, problem_sha256: str, sizes: dict, device_name: str,
              tc: tuple[tuple[str, str], ...]) -> str:
    """sha256 of the candidate's source digest, the problem's (the build runs it once: Triton specializes and
    autotunes on its inputs), the sizes, the device and the toolchain."""
    material = {"format": BUILD_FORMAT, "candidate_sha256": candidate_sha256, "problem_sha256": problem_sha256,
                "sizes": {k: sizes[k] for k in sorted(sizes)}, "device": device_name, "toolchain": dict(tc)}
    return hashlib.sha256(json.dumps(material, sort_keys=True, default=str).encode()).hexdigest()


def compiler_text(tc: tuple[tuple[str, str], ...], cuda: bool = False, triton: Optional[str] = None) -> str:
    """The report's ``details.build.compiler``: the C++ compiler (and nvcc where CUDA sources were built, Triton
    where it compiled)."""
    d = dict(tc)
    parts = [d.get("cxx", "?"), f"ninja {d.get('ninja', '?')}"]
    if cuda:
        parts.append(f"nvcc: {d.get('nvcc', '?')}")
    if triton:
        parts.append(f"triton {triton}")
    return "; ".join(parts)
