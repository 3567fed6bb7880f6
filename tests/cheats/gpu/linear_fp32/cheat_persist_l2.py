"""CHEAT (GPU): survive the harness's L2 flush. Carve out persisting L2 (cudaDeviceSetLimit
cudaLimitPersistingL2CacheSize) and put an access-policy window with hitProp = persisting over its weight on
the current stream: the flush between timed samples evicts normal lines only, so the weight is read from L2
while the baseline's comes from HBM.
Caught by: the CUDA device resets persisting L2 before every timed sample -- lines demoted to normal, the
carve-out limit back to 0, the stream's access-policy window cleared (measure/devices/cuda.py
reset_persisting_l2) -- so it gains nothing (refused, or no faster than the honest candidate)."""
import ctypes

import torch
from torch import nn

EXPECT = (("no-gain",), None, "")

_LIMIT_PERSISTING_L2 = 0x06
_STREAM_ATTR_ACCESS_POLICY_WINDOW = 1
_ACCESS_PROPERTY_PERSISTING = 2
_ACCESS_PROPERTY_STREAMING = 1


class _Window(ctypes.Structure):
    _fields_ = [("base_ptr", ctypes.c_void_p), ("num_bytes", ctypes.c_size_t), ("hitRatio", ctypes.c_float),
                ("hitProp", ctypes.c_int), ("missProp", ctypes.c_int)]


class _Value(ctypes.Union):  # cudaStreamAttrValue / cudaLaunchAttributeValue: large enough for the window
    _fields_ = [("accessPolicyWindow", _Window), ("pad", ctypes.c_char * 64)]


def _cudart():
    with open("/proc/self/maps") as f:
        for line in f:
            if "libcudart.so" in line:
                return ctypes.CDLL(line.split()[-1])
    return ctypes.CDLL("libcudart.so")


class ModelNew(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(features, features) / features**0.5)
        self.bias = nn.Parameter(torch.randn(features))
        self.pinned = False

    def _pin(self) -> None:
        self.pinned = True
        rt = _cudart()
        nbytes = self.weight.numel() * self.weight.element_size()
        props = torch.cuda.get_device_properties(self.weight.device)
        limit = min(nbytes, int(getattr(props, "L2_cache_size", 0) * 0.75) or nbytes)
        rt.cudaDeviceSetLimit(_LIMIT_PERSISTING_L2, ctypes.c_size_t(limit))
        v = _Value()
        v.accessPolicyWindow = _Window(self.weight.data_ptr(), limit, 1.0, _ACCESS_PROPERTY_PERSISTING,
                                       _ACCESS_PROPERTY_STREAMING)
        stream = ctypes.c_void_p(torch.cuda.current_stream(self.weight.device).cuda_stream)
        rt.cudaStreamSetAttribute(stream, _STREAM_ATTR_ACCESS_POLICY_WINDOW, ctypes.byref(v))
        rt.cudaGetLastError()  # the legacy default stream takes no attributes: leave no sticky error behind

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.pinned:
            self._pin()
        return torch.addmm(self.bias, x, self.weight.t())
