"""CHEAT (GPU, jail): hog the GPU's memory from a helper meant to outlive the item. At import, start a helper in a
session of its own that takes 90% of the GPU's free memory through the CUDA driver (ctypes) and holds it for five
minutes: without the jail every later item of the session -- its golden outputs, its sandboxes -- would find the
GPU full and fail. The candidate itself computes honestly.
Caught by: the jail's pid namespace -- the helper dies with the sandbox, and its memory with it -- and the
controller's count of the sandbox's processes while it was alive (measure/helper_watch.py, ThreadGate: integrity,
naming the helper and its GPU memory). The honest item after it in the session must be accepted: nothing lost.
The GPU itself has no per-process memory limit (CUDA has none, and no cgroup covers device memory): an item that
takes the GPU's memory harms its own item, no other."""
import subprocess
import sys

import torch
from torch import nn

EXPECT = (("rejected", "error"), None, r"helper process|out of memory|OUT_OF_MEMORY|memory")
SURVIVOR = "atgpuhog"

HELPER = r'''
import ctypes, os, sys, time
ctypes.CDLL(None).prctl(15, sys.argv[1].encode(), 0, 0, 0)  # PR_SET_NAME
cu = ctypes.CDLL("libcuda.so.1")
dev, ctx, buf = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_uint64()
free, total = ctypes.c_size_t(), ctypes.c_size_t()
assert cu.cuInit(0) == 0 and cu.cuDeviceGet(ctypes.byref(dev), 0) == 0
assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0 and cu.cuCtxSetCurrent(ctx) == 0
cu.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total))
want = int(free.value * 0.9)
rc = cu.cuMemAlloc_v2(ctypes.byref(buf), ctypes.c_size_t(want))
print(f"helper: took {want / 2**30:.1f} GiB of {free.value / 2**30:.1f} GiB free (CUresult {rc})", flush=True)
time.sleep(300)
'''

_HELPER = subprocess.Popen([sys.executable, "-c", HELPER, SURVIVOR], start_new_session=True, stdin=subprocess.DEVNULL)
print(f"JAIL-CHEAT gpu_memory_hog: started helper pid {_HELPER.pid}", flush=True)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=-1)
