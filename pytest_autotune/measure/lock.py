"""Per-device timing locks shared by every process on the host (xdist workers, parallel CI jobs).

Timing takes the device's lock exclusively; correctness work takes it shared. So two processes never time on
the same device at once, and nothing else runs on the device while one times, but correctness gates of several
workers run side by side. POSIX ``flock`` on a file per device key.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from pathlib import Path
from typing import Iterator

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

LOCK_DIR_ENV = "PYTEST_AUTOTUNE_LOCK_DIR"


def lock_dir() -> Path:
    d = Path(os.environ.get(LOCK_DIR_ENV) or Path(tempfile.gettempdir()) / "pytest-autotune-locks")
    d.mkdir(parents=True, exist_ok=True)
    return d


class DeviceLock:
    def __init__(self, key: str) -> None:
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in key)
        self.path = lock_dir() / f"{safe}.lock"
        self.waited_s = 0.0

    @contextlib.contextmanager
    def _hold(self, mode: int) -> Iterator[None]:
        if fcntl is None:
            yield
            return
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            t0 = time.perf_counter()
            fcntl.flock(fd, mode)
            self.waited_s += time.perf_counter() - t0
            try:
                yield
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def exclusive(self) -> "contextlib.AbstractContextManager[None]":
        return self._hold(fcntl.LOCK_EX if fcntl else 0)

    def shared(self) -> "contextlib.AbstractContextManager[None]":
        return self._hold(fcntl.LOCK_SH if fcntl else 0)
