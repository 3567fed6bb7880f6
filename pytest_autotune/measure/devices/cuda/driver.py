"""The few CUDA driver-API entry points the device needs, through ctypes on ``libcuda``.

``libcuda`` is the library every CUDA program of the process already uses, so the current context is torch's
primary context. Hand-rolled (ctypes rather than a binding package) because the device machines carry no
``cuda-python`` and the calls are few: persisting-L2 control (no torch API), device attributes, and inter-process
memory handles without torch's shared-memory reference counters (``_share_cuda_`` makes the consumer decrement a
counter at an offset the producer names: a hostile sandbox could aim that write anywhere in the controller's
mapping, so the harness does not use it), and the head start's hold (:mod:`.hold`: pinned host memory mapped into
the device, a PTX module loaded by the driver's JIT, one launch per sample; torch has no API for either).
"""

from __future__ import annotations

import ctypes
import ctypes.util
from typing import Any, Optional

#: CUlimit CU_LIMIT_PERSISTING_L2_CACHE_SIZE (cuda.h); the runtime's cudaLimitPersistingL2CacheSize has the same value
CU_LIMIT_PERSISTING_L2_CACHE_SIZE = 0x06
#: CUstreamAttrID CU_STREAM_ATTRIBUTE_ACCESS_POLICY_WINDOW (= CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW)
CU_STREAM_ATTRIBUTE_ACCESS_POLICY_WINDOW = 1
#: CUdevice_attribute values
CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16
CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE = 38
CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR = 39
CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE = 108
#: size of the CUstreamAttrValue / CUlaunchAttributeValue union (cuda.h pads it to 64 bytes)
ATTR_VALUE_BYTES = 64
#: CU_IPC_HANDLE_SIZE and CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS (cuda.h)
IPC_HANDLE_BYTES = 64
CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS = 0x1
#: cuMemHostAlloc flags: usable by every context, mapped into the device's address space
CU_MEMHOSTALLOC_PORTABLE = 0x01
CU_MEMHOSTALLOC_DEVICEMAP = 0x02
#: CUjit_option: where the JIT writes its error log, and that buffer's size
CU_JIT_ERROR_LOG_BUFFER = 5
CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6
JIT_LOG_BYTES = 4096

_CUdeviceptr = ctypes.c_uint64


class CUipcMemHandle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_ubyte * IPC_HANDLE_BYTES)]


class DriverError(RuntimeError):
    """A driver call returned an error code (the code is in the message)."""


class Driver:
    def __init__(self) -> None:
        self.lib: Any = None
        self.error: Optional[str] = None
        self.kernel_error = "libcuda not loaded"
        names = ["libcuda.so.1", "libcuda.so", ctypes.util.find_library("cuda") or ""]
        for name in [n for n in names if n]:
            try:
                self.lib = ctypes.CDLL(name)
                break
            except OSError as e:
                self.error = f"{name}: {e}"
        if self.lib is None:
            self.error = self.error or "libcuda not found"
            return
        try:
            for fn, args in (
                ("cuCtxResetPersistingL2Cache", []),
                ("cuCtxSetLimit", [ctypes.c_int, ctypes.c_size_t]),
                ("cuCtxGetLimit", [ctypes.POINTER(ctypes.c_size_t), ctypes.c_int]),
                ("cuStreamSetAttribute", [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]),
                ("cuDeviceGet", [ctypes.POINTER(ctypes.c_int), ctypes.c_int]),
                ("cuDeviceGetAttribute", [ctypes.POINTER(ctypes.c_int), ctypes.c_int, ctypes.c_int]),
                ("cuDriverGetVersion", [ctypes.POINTER(ctypes.c_int)]),
                ("cuIpcGetMemHandle", [ctypes.POINTER(CUipcMemHandle), _CUdeviceptr]),
                ("cuIpcCloseMemHandle", [_CUdeviceptr]),
            ):
                f = getattr(self.lib, fn)
                f.argtypes = args
                f.restype = ctypes.c_int
            # cuda.h maps these names to their _v2 entry points
            self._open = _versioned(self.lib, "cuIpcOpenMemHandle",
                                    [ctypes.POINTER(_CUdeviceptr), CUipcMemHandle, ctypes.c_uint])
            self._range = _versioned(self.lib, "cuMemGetAddressRange",
                                     [ctypes.POINTER(_CUdeviceptr), ctypes.POINTER(ctypes.c_size_t), _CUdeviceptr])
        except AttributeError as e:
            self.error = f"libcuda lacks {e}"
            self.lib = None
            return
        #: why the hold's entry points are missing ("" when present): they are optional, the rest works without
        self.kernel_error = _bind(self.lib, (
            ("cuMemHostAlloc", [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t, ctypes.c_uint]),
            ("cuMemFreeHost", [ctypes.c_void_p]),
            ("cuMemsetD8_v2", [_CUdeviceptr, ctypes.c_ubyte, ctypes.c_size_t]),
            ("cuMemAlloc_v2", [ctypes.POINTER(_CUdeviceptr), ctypes.c_size_t]),
            ("cuModuleLoadDataEx", [ctypes.POINTER(ctypes.c_void_p), ctypes.c_char_p, ctypes.c_uint,
                                    ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_void_p)]),
            ("cuModuleGetFunction", [ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p, ctypes.c_char_p]),
            ("cuLaunchKernel", [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p,
                               ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_void_p)]),
        ))
        if not self.kernel_error:
            try:
                self._host_dptr = _versioned(self.lib, "cuMemHostGetDevicePointer",
                                             [ctypes.POINTER(_CUdeviceptr), ctypes.c_void_p, ctypes.c_uint])
            except AttributeError as e:
                self.kernel_error = f"libcuda lacks {e}"

    @property
    def ok(self) -> bool:
        return self.lib is not None

    def _check(self, rc: int, what: str) -> None:
        if rc != 0:
            raise DriverError(f"{what} failed with CUresult {rc}")

    # ------------------------------------------------------------------------------------ persisting L2
    def persisting_limit(self) -> Optional[int]:
        if not self.ok:
            return None
        v = ctypes.c_size_t(0)
        rc = self.lib.cuCtxGetLimit(ctypes.byref(v), CU_LIMIT_PERSISTING_L2_CACHE_SIZE)
        return int(v.value) if rc == 0 else None

    def set_persisting_limit(self, nbytes: int) -> int:
        return int(self.lib.cuCtxSetLimit(CU_LIMIT_PERSISTING_L2_CACHE_SIZE, ctypes.c_size_t(nbytes))) if self.ok else -1

    def reset_persisting_lines(self) -> int:
        return int(self.lib.cuCtxResetPersistingL2Cache()) if self.ok else -1

    def clear_access_policy_window(self, stream_handle: int) -> int:
        if not self.ok:
            return -1
        value = (ctypes.c_char * ATTR_VALUE_BYTES)()  # num_bytes = 0: no window; hit/miss properties normal
        return int(self.lib.cuStreamSetAttribute(ctypes.c_void_p(stream_handle),
                                                  CU_STREAM_ATTRIBUTE_ACCESS_POLICY_WINDOW, value))

    # ------------------------------------------------------------------------------------ device facts
    def device_attribute(self, ordinal: int, attr: int) -> Optional[int]:
        if not self.ok:
            return None
        dev = ctypes.c_int(0)
        if self.lib.cuDeviceGet(ctypes.byref(dev), ordinal) != 0:
            return None
        v = ctypes.c_int(0)
        return int(v.value) if self.lib.cuDeviceGetAttribute(ctypes.byref(v), attr, dev.value) == 0 else None

    def driver_version(self) -> Optional[str]:
        if not self.ok:
            return None
        v = ctypes.c_int(0)
        if self.lib.cuDriverGetVersion(ctypes.byref(v)) != 0:
            return None
        return f"{v.value // 1000}.{(v.value % 1000) // 10}"

    # ------------------------------------------------------------------------------------ IPC
    def address_range(self, ptr: int) -> tuple[int, int]:
        """(base, size) of the allocation that contains device pointer ``ptr``."""
        base, size = _CUdeviceptr(0), ctypes.c_size_t(0)
        self._check(self._range(ctypes.byref(base), ctypes.byref(size), _CUdeviceptr(ptr)), "cuMemGetAddressRange")
        return int(base.value), int(size.value)

    def ipc_handle(self, base: int) -> bytes:
        h = CUipcMemHandle()
        self._check(self.lib.cuIpcGetMemHandle(ctypes.byref(h), _CUdeviceptr(base)), "cuIpcGetMemHandle")
        return bytes(h.reserved)

    def ipc_open(self, handle: bytes) -> int:
        if len(handle) != IPC_HANDLE_BYTES:
            raise DriverError(f"an IPC handle has {len(handle)} bytes, not {IPC_HANDLE_BYTES}")
        h = CUipcMemHandle()
        ctypes.memmove(h.reserved, handle, IPC_HANDLE_BYTES)
        ptr = _CUdeviceptr(0)
        self._check(self._open(ctypes.byref(ptr), h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS), "cuIpcOpenMemHandle")
        return int(ptr.value)

    def ipc_close(self, ptr: int) -> None:
        self._check(self.lib.cuIpcCloseMemHandle(_CUdeviceptr(ptr)), "cuIpcCloseMemHandle")


    # ------------------------------------------------------------------------------------ the hold (.hold)
    def host_alloc(self, nbytes: int) -> tuple[int, int]:
        """Pinned host memory mapped into the device: (host address, device address)."""
        if self.kernel_error:
            raise DriverError(self.kernel_error)
        host = ctypes.c_void_p(0)
        self._check(self.lib.cuMemHostAlloc(ctypes.byref(host), ctypes.c_size_t(nbytes),
                                            CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP), "cuMemHostAlloc")
        dev = _CUdeviceptr(0)
        rc = self._host_dptr(ctypes.byref(dev), host, 0)
        if rc != 0:
            self.lib.cuMemFreeHost(host)
            self._check(rc, "cuMemHostGetDevicePointer")
        return int(host.value or 0), int(dev.value)

    def host_free(self, host: int) -> None:
        if not self.kernel_error:
            self.lib.cuMemFreeHost(ctypes.c_void_p(host))

    def device_alloc(self, nbytes: int) -> int:
        """Device memory outside torch's allocator, zeroed: its address."""
        if self.kernel_error:
            raise DriverError(self.kernel_error)
        ptr = _CUdeviceptr(0)
        self._check(self.lib.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(nbytes)), "cuMemAlloc")
        self._check(self.lib.cuMemsetD8_v2(ptr, 0, ctypes.c_size_t(nbytes)), "cuMemsetD8")
        return int(ptr.value)

    def load_function(self, ptx: str, name: str) -> tuple[int, int]:
        """(module, function) of kernel ``name`` in ``ptx``, compiled by the driver's JIT for this device. A JIT
        error raises with the JIT's own log."""
        if self.kernel_error:
            raise DriverError(self.kernel_error)
        log = ctypes.create_string_buffer(JIT_LOG_BYTES)
        opts = (ctypes.c_int * 2)(CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES)
        vals = (ctypes.c_void_p * 2)(ctypes.cast(log, ctypes.c_void_p), ctypes.c_void_p(JIT_LOG_BYTES))
        module = ctypes.c_void_p(0)
        rc = self.lib.cuModuleLoadDataEx(ctypes.byref(module), ptx.encode() + b"\0", 2, opts, vals)
        if rc != 0:
            raise DriverError(f"cuModuleLoadDataEx failed with CUresult {rc}: {log.value.decode(errors='replace')}")
        fn = ctypes.c_void_p(0)
        self._check(self.lib.cuModuleGetFunction(ctypes.byref(fn), module, name.encode()), "cuModuleGetFunction")
        return int(module.value or 0), int(fn.value or 0)

    def launch(self, function: int, stream: int, args: list, blocks: int = 1, threads: int = 1) -> int:
        """``blocks`` x ``threads`` of ``function`` on ``stream``; ``args``: ctypes values in the kernel's order.
        Returns the CUresult (0: queued)."""
        params = (ctypes.c_void_p * len(args))(*[ctypes.addressof(a) for a in args])
        return int(self.lib.cuLaunchKernel(ctypes.c_void_p(function), blocks, 1, 1, threads, 1, 1, 0,
                                           ctypes.c_void_p(stream), params, None))


def _bind(lib: Any, table: tuple) -> str:
    """Declare the signatures of ``table``'s (name, argtypes); "" when all exist, else what is missing."""
    for fn, args in table:
        f = getattr(lib, fn, None)
        if f is None:
            return f"libcuda lacks {fn}"
        f.argtypes = args
        f.restype = ctypes.c_int
    return ""


def _versioned(lib: Any, name: str, argtypes: list) -> Any:
    for candidate in (f"{name}_v2", name):
        f = getattr(lib, candidate, None)
        if f is not None:
            f.argtypes = argtypes
            f.restype = ctypes.c_int
            return f
    raise AttributeError(name)


__all__ = ["Driver", "DriverError", "IPC_HANDLE_BYTES"] + [n for n in dir() if n.startswith("CU_")]
