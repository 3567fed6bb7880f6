"""What the processes of one run share in the build cache's folder besides its entries (docs/guide/
compiled-candidates.md, "Builds in parallel"): a lock per key, so that two processes (xdist workers, each of which
collects every item) never build the same key at once -- the second waits and then reads what the first left -- and
the run's own records of what is never cached: a build that failed (its reason and the compilers' output) and a
build the candidate cut short by raising (its entry). Both live in ``.run-<run id>/`` and go when the run ends
(:func:`clear_run`), so a later run builds them again, as before.

Only controllers write here; the folder is out of every sandbox's view like the store (sandbox/jail_session.py).
"""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid
from pathlib import Path
from typing import Optional

from .cache import BuildCache

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no locks, every process builds what it needs
    fcntl = None  # type: ignore[assignment]

LOCKS = ".locks"
RUN_PREFIX = ".run-"
#: a run's records older than this are a crashed session's, removed when a later pool starts
STALE_RUN_S = 24 * 3600.0


class KeyLock:
    """An exclusive ``flock`` on ``<root>/.locks/<key>.lock``, held while one process builds the key. Threads of one
    process hold it through descriptors of their own, so it excludes them from each other too."""

    def __init__(self, root: Path, key: str) -> None:
        self.path = root / LOCKS / f"{key}.lock"
        self._fd: Optional[int] = None

    def acquire(self, block: bool) -> Optional[float]:
        """Seconds waited for it; None when ``block`` is false and another holder has it."""
        if fcntl is None:
            return 0.0
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        t0 = time.perf_counter()
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if block else fcntl.LOCK_NB))
        except BlockingIOError:
            os.close(fd)
            return None
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        return time.perf_counter() - t0

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


class RunRecords:
    """The run's builds that the cache does not keep, readable by every process of the run."""

    def __init__(self, root: Path, run_id: str) -> None:
        self.folder = root / f"{RUN_PREFIX}{run_id}"
        self.partial = BuildCache(self.folder / "partial")

    def failure(self, key: str) -> Optional[dict]:
        try:
            rec = json.loads((self.folder / "failed" / f"{key}.json").read_text())
        except (OSError, ValueError):
            return None
        return rec if isinstance(rec, dict) and isinstance(rec.get("reason"), str) else None

    def write_failure(self, key: str, record: dict) -> None:
        """Written beside, then renamed into place: a reader sees all of it or nothing."""
        folder = self.folder / "failed"
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".{key}.{uuid.uuid4().hex}"
        tmp.write_text(json.dumps(record))
        os.replace(tmp, folder / f"{key}.json")


def clear_run(root: Path, run_id: str) -> None:
    """The run's records go at its end (the controller's session finish)."""
    shutil.rmtree(root / f"{RUN_PREFIX}{run_id}", ignore_errors=True)


def clear_stale(root: Path, now: Optional[float] = None) -> None:
    """Records of runs that ended without clearing theirs (a killed session), once they are a day old."""
    now = time.time() if now is None else now
    try:
        folders = [p for p in root.iterdir() if p.name.startswith(RUN_PREFIX) and p.is_dir()]
    except OSError:
        return
    for p in folders:
        try:
            if now - p.stat().st_mtime > STALE_RUN_S:
                shutil.rmtree(p, ignore_errors=True)
        except OSError:
            pass
