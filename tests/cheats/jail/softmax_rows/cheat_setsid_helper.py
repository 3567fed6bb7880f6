"""JAIL CHEAT: leave a helper behind. Double-fork a helper into a session of its own (``setsid``: out of the
sandbox's process group, which is what the group kill reaches) and let it live on for two minutes, loading
the machine while later items are timed. Its name (``comm``) is the token below, for the test to find it. Then
compute honestly.
Caught by: the jail's pid namespace (the sandbox is its init: when it ends, the kernel kills every process in
it, setsid or not) and its cgroup (killed with it)."""
import ctypes
import os
import time

import torch
from torch import nn

TOKEN = "__TOKEN__"


def _attack() -> str:
    pid = os.fork()
    if pid == 0:
        try:
            os.setsid()
            if os.fork() == 0:
                ctypes.CDLL(None).prctl(15, TOKEN.encode()[:15], 0, 0, 0)  # PR_SET_NAME
                deadline = time.monotonic() + 120
                while time.monotonic() < deadline:
                    time.sleep(0.5)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    return f"started a setsid helper named {TOKEN} (its parent has exited)"


print(f"JAIL-CHEAT setsid_helper: {_attack()}", flush=True)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=-1)
