"""CHEAT (GPU): a second CUDA context inside the candidate's own process, with a kernel left running past the call.
After its honest softmax, each call pushes a context of its own (the driver API through ctypes: torch never sees
it), launches a kernel there that spins for 2 ms, pops the context and returns: the spin runs on into whatever
the GPU does next -- the baseline's sample, time-sliced against it.
Caught by: the thread the driver starts for a new context is left running after the timed call ("thread(s) were
left running", sandbox/child.py and ThreadGate); a kernel outside the timed stream also shows as host time beyond
the event time (DeviceClockGate) -> integrity. Kept refused whatever the process rule does."""
import ctypes

import torch
from torch import nn

EXPECT = (("rejected",), "integrity", r"thread|outside the timed stream|side stream|helper process")

PTX = b""".version 7.0
.target sm_80
.address_size 64
.visible .entry spin(.param .u64 spin_ns)
{
  .reg .pred %p<2>;
  .reg .b64 %rd<5>;
  ld.param.u64 %rd1, [spin_ns];
  mov.u64 %rd2, %globaltimer;
L_loop:
  mov.u64 %rd3, %globaltimer;
  sub.s64 %rd4, %rd3, %rd2;
  setp.lt.u64 %p1, %rd4, %rd1;
  @%p1 bra L_loop;
  ret;
}
"""


class _Second:
    def __init__(self) -> None:
        self.cu = cu = ctypes.CDLL("libcuda.so.1")
        self.ctx, self.fn = ctypes.c_void_p(), ctypes.c_void_p()
        dev, mod = ctypes.c_int(), ctypes.c_void_p()
        assert cu.cuDeviceGet(ctypes.byref(dev), torch.cuda.current_device()) == 0
        create = getattr(cu, "cuCtxCreate_v2", None) or cu.cuCtxCreate
        assert create(ctypes.byref(self.ctx), 0, dev) == 0, "cuCtxCreate"  # current on this thread now
        assert cu.cuModuleLoadData(ctypes.byref(mod), ctypes.c_char_p(PTX)) == 0, "cuModuleLoadData"
        assert cu.cuModuleGetFunction(ctypes.byref(self.fn), mod, b"spin") == 0
        popped = ctypes.c_void_p()
        cu.cuCtxPopCurrent_v2(ctypes.byref(popped))  # torch's context is current again
        cu.cuLaunchKernel.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3
        self.spin_ns = ctypes.c_uint64(2_000_000)
        self.params = (ctypes.c_void_p * 1)(ctypes.cast(ctypes.byref(self.spin_ns), ctypes.c_void_p))

    def spin(self) -> None:
        cu = self.cu
        cu.cuCtxPushCurrent_v2(self.ctx)
        cu.cuLaunchKernel(self.fn, 1024, 1, 1, 128, 1, 1, 0, None, self.params, None)  # not waited for
        popped = ctypes.c_void_p()
        cu.cuCtxPopCurrent_v2(ctypes.byref(popped))


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.second = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.softmax(x, dim=-1)
        if self.second is None:
            self.second = _Second()
        self.second.spin()
        return out
