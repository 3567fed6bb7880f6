"""GPU outputs cross the sandbox boundary as CUDA IPC handles: no full-size tensor ever reaches the host.

Sandbox side (:func:`export_cuda_tensor`): the allocation that holds the output's storage is exported with
``cuIpcGetMemHandle`` (64 bytes); the message carries the handle, where the storage starts inside the allocation,
and the tensor's geometry (dtype, shape, strides, storage offset). The output itself stays alive in the sandbox
until the controller's next request.

Controller side (:class:`CudaIpcExport`): the handle is opened (``cuIpcOpenMemHandle``), the TRUE size of the
mapped allocation is read back (``cuMemGetAddressRange``) and the declared geometry must lie inside it -- a
hostile sandbox that lies about sizes or offsets gets a refusal, never an out-of-bounds read that would poison the
controller's CUDA context. :meth:`CudaIpcExport.snapshot` copies the live memory device-to-device into the
controller's own allocation: a later write by the candidate changes nothing already copied, and a second snapshot
after a delay shows whether anything still writes (late writers on side streams).
"""

from __future__ import annotations

from typing import Any, Optional

import torch

from ....sandbox.wire import dtype_from_name, dtype_name
from ..memfd import ExportError
from .driver import IPC_HANDLE_BYTES, Driver, DriverError


def export_cuda_tensor(drv: Driver, t: torch.Tensor) -> dict[str, Any]:
    """IPC metadata for a plain CUDA tensor (checked by the caller); raises :class:`DriverError` if the driver
    cannot export it (then the caller falls back to a host copy)."""
    meta: dict[str, Any] = {"via": "cuda-ipc", "dtype": dtype_name(t.dtype), "shape": list(t.shape),
                            "stride": list(t.stride()), "storage_offset": int(t.storage_offset()),
                            "device_index": int(t.device.index or 0)}
    if t.numel() == 0:
        meta["via"] = "empty"
        return meta
    storage_ptr = int(t.untyped_storage().data_ptr())
    base, size = drv.address_range(storage_ptr)
    meta.update(handle=drv.ipc_handle(base), alloc_offset=storage_ptr - base, alloc_size=size)
    return meta


def _extent_bytes(shape: list, stride: list, storage_offset: int, itemsize: int) -> int:
    """Bytes from the storage's start to one past the last element the view touches."""
    last = storage_offset + sum((n - 1) * s for n, s in zip(shape, stride))
    return (last + 1) * itemsize


class CudaIpcExport:
    """A candidate output opened by the controller. ``live``: the mapping shows the candidate's memory as it is
    now, so every :meth:`snapshot` is a fresh device-to-device copy."""

    live = True

    def __init__(self, drv: Driver, meta: dict[str, Any], device: torch.device) -> None:
        self._drv = drv
        self._ptr: Optional[int] = None
        self.device = device
        self.dtype = dtype_from_name(meta.get("dtype"))
        shape, stride = meta.get("shape"), meta.get("stride")
        if (not isinstance(shape, list) or not isinstance(stride, list) or len(shape) != len(stride)
                or not all(type(v) is int and v >= 0 for v in shape + stride)):
            raise ExportError("an output's shape or strides are malformed")
        self.shape, self.stride = shape, stride
        offset = meta.get("storage_offset")
        if type(offset) is not int or offset < 0:
            raise ExportError("an output's storage offset is malformed")
        if meta.get("via") == "empty":
            if any(n == 0 for n in shape):
                self._view: Optional[torch.Tensor] = torch.empty(shape, dtype=self.dtype, device=device)
                return
            raise ExportError("an output declared empty has elements")
        handle, alloc_offset = meta.get("handle"), meta.get("alloc_offset")
        if meta.get("via") != "cuda-ipc" or not isinstance(handle, bytes) or len(handle) != IPC_HANDLE_BYTES:
            raise ExportError("an output arrived without its CUDA IPC handle")
        if type(alloc_offset) is not int or alloc_offset < 0:
            raise ExportError("an output's offset inside its allocation is malformed")
        itemsize = torch.empty((), dtype=self.dtype).element_size()
        need = alloc_offset + _extent_bytes(shape, stride, offset, itemsize)
        try:
            self._ptr = drv.ipc_open(handle)
            _, true_size = drv.address_range(self._ptr)
        except DriverError as e:
            self.close()
            raise ExportError(f"the controller cannot open the output's CUDA IPC handle ({e})") from None
        if need > true_size or (alloc_offset + offset * itemsize) % itemsize:
            self.close()
            raise ExportError(f"an output claims {need} bytes of an allocation of {true_size}: out of bounds")
        span = need - alloc_offset
        raw = torch.as_tensor(_CudaBytes(self._ptr + alloc_offset, span, device), device=device)
        self._view = raw.view(self.dtype).as_strided(shape, stride, offset)

    def snapshot(self) -> torch.Tensor:
        if self._view is None:
            raise ExportError("the output was already closed")
        out = torch.empty(self.shape, dtype=self.dtype, device=self.device)
        out.copy_(self._view)
        return out

    def close(self) -> None:
        self._view = None
        if self._ptr is not None:
            ptr, self._ptr = self._ptr, None
            try:
                torch.cuda.synchronize(self.device)  # copies from the mapping finish before it goes
                self._drv.ipc_close(ptr)
            except (DriverError, RuntimeError):
                pass


class _CudaBytes:
    """A byte range of device memory, exposed through ``__cuda_array_interface__`` (torch views it without a
    copy; bytes, because the interface has no type string for bfloat16)."""

    def __init__(self, ptr: int, nbytes: int, device: torch.device) -> None:
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (ptr, False), "version": 2,
                                         "strides": None}
