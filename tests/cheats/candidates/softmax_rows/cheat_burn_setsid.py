"""CHEAT: slow the baseline from other processes *outside its process group*. Like ``cheat_burn_process``, but
every helper calls ``setsid()`` first, so counting the sandbox's process group finds none. On its first call,
fork helper processes (four per CPU) that spin; stop them (SIGSTOP) whenever its own call starts and let them go (SIGCONT) when it
returns. The baseline shares the CPUs with the spinners, the candidate never does. No name is replaced, no
setting of the sandbox changes and it has no extra thread, so neither the tamper snapshot nor the thread checks
see anything; the helpers name themselves after this file's path (``comm``), for the test to find them.
Caught by: the controller, which counts the live processes of the sandbox's *pid namespace* (the sandbox is its
init: every descendant, setsid or not, lives there) and of its cgroup where there is one, from the host's /proc,
before every sample and after every round (measure/helper_watch.py) -> integrity, naming the helpers. Without a pid
namespace and a cgroup (isolation off) this cheat is not caught: docs/design/threat-model.md. The helpers die with the
sandbox's pid namespace."""
import ctypes
import hashlib
import os
import signal
import time
from pathlib import Path

import torch
from torch import nn

_pids: list = []


NAME = "ats" + hashlib.sha256(str(Path(__file__).resolve()).encode()).hexdigest()[:12]


def _start() -> None:
    for _ in range(4 * (os.cpu_count() or 1)):
        pid = os.fork()
        if pid == 0:  # a helper: leave the process group, spin until killed
            try:
                os.setsid()
                ctypes.CDLL(None).prctl(15, NAME.encode(), 0, 0, 0)  # PR_SET_NAME
                # a safety net for machines without the jail, where nothing else would end them: a minute
                end = time.monotonic() + 60
                while time.monotonic() < end:
                    for _ in range(100_000):
                        pass
            finally:
                os._exit(0)
        _pids.append(pid)
    print(f"{NAME} started {len(_pids)} helpers", flush=True)


def _signal(sig: int) -> None:
    for p in _pids:
        os.kill(p, sig)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not _pids:
            _start()
        _signal(signal.SIGSTOP)
        try:
            return torch.softmax(x, dim=-1)
        finally:
            _signal(signal.SIGCONT)
