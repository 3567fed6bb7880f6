"""CHEAT (GPU): an orphaned helper that fills the GPU's memory bandwidth between the candidate's calls. On its
first call the candidate starts, through ``sh -c '... &'``, a helper whose parent exits at once (an orphan, adopted
by init -- of the sandbox's pid namespace, under the jail); the helper allocates 1 GiB through the CUDA driver
(ctypes, no torch) and runs ``cuMemsetD32`` over it whenever the candidate is not in a call: no kernel of its own,
only copy engines and HBM, which the softmax of the baseline needs.
Caught by: the controller's count of the candidate's pid namespace from the host's /proc, and NVML's list of
processes with a CUDA context (measure/helper_watch.py, ThreadGate) -> integrity, naming the helper."""
import mmap
import os
import struct
import subprocess
import sys
import time

import torch
from torch import nn

EXPECT = (("rejected",), "integrity", r"helper process\(es\) of the candidate.*pid \d+")
SURVIVOR = "atgpuorphan"

HELPER = r'''
import ctypes, mmap, os, struct, sys, time
ctypes.CDLL(None).prctl(15, sys.argv[2].encode(), 0, 0, 0)  # PR_SET_NAME
cu = ctypes.CDLL("libcuda.so.1")
def ck(r, what):
    if r:
        print(f"helper: {what} failed: CUresult {r}", flush=True)
        os._exit(1)
dev, ctx, buf = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_uint64()
ck(cu.cuInit(0), "cuInit")
ck(cu.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
ck(cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
ck(cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
n = 1 << 28  # 1 GiB of 32-bit words
ck(cu.cuMemAlloc_v2(ctypes.byref(buf), ctypes.c_size_t(n * 4)), "cuMemAlloc")
cu.cuMemsetD32_v2.argtypes = [ctypes.c_uint64, ctypes.c_uint, ctypes.c_size_t]
f = open(sys.argv[1], "r+b")
flag = mmap.mmap(f.fileno(), 16)
end = time.monotonic() + 120  # without the jail nothing else ends it: two minutes
while time.monotonic() < end:
    in_call, last = struct.unpack_from("=QQ", flag, 0)
    if in_call or time.monotonic_ns() - last < 500_000:
        time.sleep(0.00005)
        continue
    ck(cu.cuMemsetD32_v2(buf.value, 7, n), "cuMemsetD32")
    ck(cu.cuCtxSynchronize(), "cuCtxSynchronize")
'''

_PATH = f"/tmp/atgpu-orphan-{os.getpid()}.flag"
_FLAG = None


def _start() -> None:
    global _FLAG
    with open(_PATH, "wb") as f:
        f.write(b"\0" * 16)
    _FLAG = mmap.mmap(os.open(_PATH, os.O_RDWR), 16)
    with open(_PATH + ".py", "w") as f:
        f.write(HELPER)
    # sh starts the helper in the background and exits: the helper's parent is gone before the first timed round
    subprocess.run(["/bin/sh", "-c", f"'{sys.executable}' '{_PATH}.py' '{_PATH}' {SURVIVOR} >/dev/null 2>&1 &"],
                   check=False, stdin=subprocess.DEVNULL)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if _FLAG is None:
            _start()
        assert _FLAG is not None
        struct.pack_into("=Q", _FLAG, 0, 1)
        try:
            return torch.softmax(x, dim=-1)
        finally:
            struct.pack_into("=QQ", _FLAG, 0, 0, time.monotonic_ns())
