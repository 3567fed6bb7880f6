"""Host tensors cross the sandbox boundary as sealed memfds, not as bytes on the socket.

Sandbox side (:func:`export_host_tensor`): the tensor's bytes are copied once into an anonymous memory file,
the writable mapping is dropped, and the file is sealed against writes, shrinking and growing
(``F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL``). Only then is its descriptor sent.

Controller side (:func:`open_host_export`): the descriptor must be a memfd carrying those seals (the kernel
refuses ``F_GET_SEALS`` on anything else), large enough for the declared shape and dtype; it is mapped read-only
and used without a copy. The seals are the kernel's promise that the candidate can no longer change what the
controller judges, so no snapshot copy is needed. Hand-rolled on ``os``/``fcntl``/``mmap`` because no library
offers sealed-memfd tensor transfer; torch's own ``share_memory_`` uses unsealed, writable shared memory.
"""

from __future__ import annotations

import fcntl
import math
import mmap
import os
import warnings
from typing import Any

import numpy as np
import torch

from ...errors import AutotuneError
from ...sandbox.wire import PassedFd, dtype_from_name, dtype_name

_SEALS = fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL
_REQUIRED = fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW


class ExportError(AutotuneError):
    """An exported output is not what its metadata says (the sandbox lied, or the transfer broke)."""


def export_host_tensor(t: torch.Tensor) -> dict[str, Any]:
    """A sealed memfd holding ``t``'s values, row-major. ``t`` must be a plain CPU tensor (checked by the caller)."""
    src = t.detach().contiguous()
    nbytes = src.numel() * src.element_size()
    fd = os.memfd_create("autotune-output", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        if nbytes:
            os.ftruncate(fd, nbytes)
            with mmap.mmap(fd, nbytes) as mm:
                mm[:] = memoryview(src.reshape(-1).view(torch.uint8).numpy())  # type: ignore[arg-type]
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, _SEALS)
    except BaseException:
        os.close(fd)
        raise
    return {"via": "memfd", "dtype": dtype_name(src.dtype), "shape": list(src.shape), "nbytes": nbytes,
            "fd": PassedFd(fd)}


class HostExport:
    """An output the controller opened: immutable (sealed), mapped read-only, viewed as a tensor."""

    live = False  # a snapshot: later writes by the candidate cannot reach it

    def __init__(self, meta: dict[str, Any]) -> None:
        if meta.get("via") != "memfd" or not isinstance(meta.get("fd"), PassedFd):
            raise ExportError("an output arrived without its memory handle")
        dt = dtype_from_name(meta.get("dtype"))
        shape = meta.get("shape")
        if not isinstance(shape, list) or not all(type(s) is int and s >= 0 for s in shape):
            raise ExportError("an output's shape is malformed")
        nbytes = math.prod(shape) * torch.empty((), dtype=dt).element_size()
        if meta.get("nbytes") != nbytes:
            raise ExportError("an output's byte count does not match its shape and dtype")
        fd = meta["fd"].take()
        try:
            try:
                seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
            except OSError:
                raise ExportError("an output's handle is not a sealed memory file") from None
            if seals & _REQUIRED != _REQUIRED:
                raise ExportError("an output's memory file is not sealed against writes")
            if os.fstat(fd).st_size < nbytes:
                raise ExportError("an output's memory file is smaller than its shape")
            self._mm = mmap.mmap(fd, nbytes, prot=mmap.PROT_READ) if nbytes else None
        finally:
            os.close(fd)
        if self._mm is None:
            self._tensor = torch.empty(shape, dtype=dt)
        else:
            raw = np.frombuffer(self._mm, dtype=np.uint8, count=nbytes)
            with warnings.catch_warnings():  # read-only on purpose: the seals make it immutable
                warnings.simplefilter("ignore", UserWarning)
                self._tensor = torch.from_numpy(raw).view(dt).reshape(shape)

    def snapshot(self) -> torch.Tensor:
        return self._tensor

    def close(self) -> None:
        self._tensor = None  # type: ignore[assignment]
        # the mapping goes when the last tensor viewing it does (gates may still hold the snapshot)
        self._mm = None


__all__ = ["export_host_tensor", "HostExport", "ExportError"]
