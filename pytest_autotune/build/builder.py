"""One build, from its key to what the item needs (docs/guide/compiled-candidates.md): found in the cache, waited
for while another process builds the same key, or built in one jailed build sandbox with ``[build]``'s budget and
kept -- in the cache, or, for what the cache never keeps (a failure, a build the candidate cut short), in the run's
records (:mod:`.shared`). The build pool (:mod:`.pool`) runs many of these side by side before the first item; an
item whose build the pool did not make runs one itself (:mod:`.stage`).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import os
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Optional

from ..errors import ProblemLoadError
from ..gates.base import GateOutcome
from ..sandbox.runner import SandboxFailure
from .cache import BuildCache, BuildEntry, CacheError, safe_relative
from .compiler_log import first_error, strip_scratch
from .shared import KeyLock, RunRecords
from .toolchain import compiler_text

if TYPE_CHECKING:  # pragma: no cover
    from ..item_run import FlowEnv
    from ..problems.model import SourceFile
    from ..sandbox.runner import Sandbox

#: who made the build an item uses: this process's pool, another process of the run (an xdist worker), nobody this
#: run needed (found in the cache), or the item's own flow (no pool, or the pool's entry went missing)
BUILT_BY = ("pool", "other_process", "cache", "item")


class BuildFailed(Exception):
    """The build refused the item: ``reason`` for the report, ``log`` the compilers' whole output."""

    def __init__(self, reason: str, log: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.log = log


@dataclass(frozen=True)
class BuildJob:
    """What one build needs: the item's sources, sizes and seeds, and the key it is cached under."""

    key: str
    toolchain: tuple
    problem_src: "SourceFile"
    cand_src: "SourceFile"
    sizes: dict
    init_seed: int
    seed: int  # the seed of the inputs of the build's one call
    class_name: str
    label: str  # the item's key: the sandbox's log is named after it


@dataclass
class BuildResult:
    key: str
    built_by: str
    #: the entry's bytes where no other copy is on disk ("memory"), or for an item that is about to use them
    entry: Optional[BuildEntry] = None
    #: where the entry lies: "cache", "run" (the run's records: cut short by the candidate), "memory", or None
    where: Optional[str] = None
    failure: Optional[GateOutcome] = None
    log: str = ""
    seconds: float = 0.0  # the build (sandbox started to entry kept), or the lookup
    waited_s: float = 0.0  # for another process's build of the same key
    queued_s: float = 0.0  # the pool's: from its start to this build's
    box: Optional["Sandbox"] = None  # the build sandbox (closed; its wire statistics), where this process built it
    pool: dict = field(default_factory=dict)  # the pool that made it: its width and each build's compilers
    warnings: list[str] = field(default_factory=list)


class Builder:
    """Builds for one flow environment. ``init``: the build sandbox's init message for a job (the flow's)."""

    def __init__(self, env: "FlowEnv", init: Callable[[BuildJob], dict]) -> None:
        self.env = env
        self.init = init
        root = env.build_root
        self.cache = BuildCache(root) if root is not None else None
        self.records = RunRecords(root, env.run_id) if root is not None else None
        self.process = os.getpid()  # who built what: this process, or another of the run (an xdist worker)
        self._running: set = set()  # build sandboxes alive now (the pool's threads)
        self._running_lock = threading.Lock()

    def kill_running(self) -> None:
        """Kill every build sandbox alive now (the session was interrupted): their threads end with them."""
        with self._running_lock:
            boxes = list(self._running)
        for box in boxes:
            box.handle.kill()

    # ------------------------------------------------------------------------------------------ lookups
    def lookup(self, key: str, keep_bytes: bool) -> tuple[Optional[BuildResult], list[str]]:
        """The key's build where one is on disk -- in the cache (verified), or in the run's records (a failure, a
        build cut short) -- or None: nobody has built it; and a warning for each entry that could not be used."""
        t0 = time.perf_counter()
        warnings: list[str] = []
        for where, cache in (("cache", self.cache), ("run", self.records.partial if self.records else None)):
            if cache is None:
                continue
            try:
                entry = cache.load(key)
            except CacheError as e:
                warnings.append(f"the build cache's entry {key[:16]} could not be used and was built again: {e}")
                continue
            if entry is not None:  # built by another process of this run, or found in the cache
                m = entry.manifest
                other = m.get("run_id") == self.env.run_id and m.get("pid") != self.process
                by = "other_process" if other else "cache"
                return BuildResult(key, by, entry if keep_bytes else None, where,
                                   seconds=time.perf_counter() - t0, warnings=warnings), []
        rec = self.records.failure(key) if self.records is not None else None
        if rec is not None:
            outcome = GateOutcome(str(rec.get("gate") or "build"), rec["reason"],
                                  verdict="error" if rec.get("verdict") == "error" else "rejected")
            by = "other_process" if rec.get("pid") != self.process else "cache"
            return BuildResult(key, by, failure=outcome, log=str(rec.get("log") or ""),
                               seconds=float(rec.get("seconds") or 0.0), warnings=warnings), []
        return None, warnings

    def load(self, result: BuildResult) -> Optional[BuildEntry]:
        """The entry a result stands for, read (and verified) where it lies; None when it has gone."""
        if result.entry is not None:
            return result.entry
        cache = self.cache if result.where == "cache" else self.records.partial if (
            result.where == "run" and self.records is not None) else None
        try:
            return cache.load(result.key) if cache is not None else None
        except CacheError:
            return None

    # ------------------------------------------------------------------------------------------ obtain
    def obtain(self, job: BuildJob, *, block: bool, built_by: str, keep_bytes: bool, max_jobs: Optional[int] = None,
               staged: bool = False, call_lock: Optional[threading.Lock] = None) -> Optional[BuildResult]:
        """The job's build: found, waited for, or built here. None when ``block`` is false and another process holds
        the key's lock (it is building it: come back later)."""
        found, carried = self.lookup(job.key, keep_bytes)
        if found is not None:
            return found
        lock = KeyLock(self.env.build_root, job.key) if self.env.build_root is not None else None
        try:
            waited = lock.acquire(block) if lock is not None else 0.0
        except OSError:  # a cache folder that cannot be written: built here, and its own warning says so
            lock, waited = None, 0.0
        if waited is None:
            return None
        try:
            if lock is not None:  # another process may have finished it while this one looked or waited
                again, _ = self.lookup(job.key, keep_bytes)
                if again is not None:
                    again.waited_s = waited
                    return again
            result = self.build(job, built_by, max_jobs=max_jobs, staged=staged, call_lock=call_lock)
            result.waited_s, result.warnings[:0] = waited, carried
            self._keep(result, keep_bytes)
            return result
        finally:
            if lock is not None:
                lock.release()

    def _keep(self, result: BuildResult, keep_bytes: bool) -> None:
        """A new build into the cache; a failure or a build cut short into the run's records."""
        if result.failure is not None:
            if self.records is not None and result.failure.verdict == "rejected":
                # an error (a crash, a hang, the memory limit) is the run's circumstance, not the build's: another
                # process tries it again rather than read it
                self._try(lambda: self.records.write_failure(result.key, {  # type: ignore[union-attr]
                    "gate": result.failure.gate, "verdict": result.failure.verdict,  # type: ignore[union-attr]
                    "reason": result.failure.reason, "log": result.log,  # type: ignore[union-attr]
                    "seconds": round(result.seconds, 3), "pid": self.process}), result)
            return
        entry = result.entry
        assert entry is not None
        raised = bool(entry.manifest.get("raised"))
        cache = (self.records.partial if raised else self.cache) if self.records is not None else None
        if cache is None:
            result.where = "memory"
            return
        try:
            result.entry = cache.store(entry.key, entry.manifest, entry.files)
            result.where = "run" if raised else "cache"
        except OSError as e:  # a full disk, a cache folder the user cannot write: the item goes on uncached
            result.where = "memory"
            result.warnings.append(f"the build of {entry.key[:16]} could not be cached ({e}); it is used for this item "
                                   "and built again next time: free space or fix the permissions of the build "
                                   "cache folder (docs/guide/compiled-candidates.md)")
        if result.where != "memory" and not keep_bytes:
            result.entry = None

    @staticmethod
    def _try(write: Callable[[], None], result: BuildResult) -> None:
        try:
            write()
        except OSError as e:
            result.warnings.append(f"the build's failure could not be shared with the run's other processes ({e})")

    # ------------------------------------------------------------------------------------------ the sandbox
    def build(self, job: BuildJob, built_by: str, max_jobs: Optional[int] = None, staged: bool = False,
              call_lock: Optional[threading.Lock] = None) -> BuildResult:
        """One build sandbox for ``job``. ``max_jobs``: ninja's parallel compilers in it (the pool's share of the
        cores); ``staged``: asked in two steps, import then call, the call holding ``call_lock`` where one is given
        (the device's memory is the builds' to share)."""
        env, b = self.env, self.env.protocol.build
        t0 = time.perf_counter()
        result = BuildResult(job.key, built_by)
        init = self.init(job)
        if max_jobs:
            init = {**init, "max_jobs": max_jobs}
        try:
            with env.lock.shared():
                box = env.pool.start(init, label=f"{job.label}-build", memory_mb=b.memory_mb,
                                     max_processes=b.max_processes, limits_key="[build]")
            result.box = box
            with self._running_lock:
                self._running.add(box)
            try:
                with box:
                    if not box.hello.get("ok"):
                        raise ProblemLoadError(box.hello.get("path") or "sandbox",
                                               box.hello.get("error", "load failed"))
                    reply = self._request(box, job, staged, call_lock)
            finally:
                with self._running_lock:
                    self._running.discard(box)
            if not reply.get("ok"):
                raise SandboxFailure("protocol", f"the build command failed: {reply.get('error')}",
                                     str(reply.get("trace") or ""))
            try:
                result.entry = self.entry(job, reply)
            except (AttributeError, TypeError, ValueError, IndexError, KeyError) as e:
                # the reply is the candidate's process speaking: a shape it should not have is the sandbox's
                # failure, with a verdict, never the controller's traceback
                raise SandboxFailure("protocol", f"the build sandbox's reply was malformed ({type(e).__name__}: "
                                     f"{e})") from None
        except BuildFailed as e:
            result.failure, result.log = GateOutcome.refuse("build", e.reason), e.log
        except SandboxFailure as e:
            result.failure = GateOutcome("build", f"the build sandbox: {e}", verdict="error")
        except ProblemLoadError as e:
            result.failure = GateOutcome.refuse("load", f"{e.path}: {e.reason}")
        result.seconds = time.perf_counter() - t0
        return result

    def _request(self, box: "Sandbox", job: BuildJob, staged: bool,
                 call_lock: Optional[threading.Lock]) -> dict[str, Any]:
        env, b = self.env, self.env.protocol.build
        last = {"cmd": "build", "seed": job.seed, "max_bytes": b.max_artifact_mb << 20}
        with env.lock.shared():
            if not staged:
                return box.request(last, timeout=b.timeout_s, phase="build")
            t0 = time.perf_counter()
            first = box.request({"cmd": "build", "stage": "import"}, timeout=b.timeout_s, phase="build")
            if not first.get("ok"):
                return first
            left = max(b.timeout_s - (time.perf_counter() - t0), 1.0)  # waiting for the lock is not the build's
            with call_lock if call_lock is not None else contextlib.nullcontext():
                return box.request({**last, "stage": "call"}, timeout=left, phase="build")

    def entry(self, job: BuildJob, reply: dict) -> BuildEntry:
        """The build sandbox's reply as a cache entry (not yet stored), or BuildFailed with the compiler's error."""
        b = self.env.protocol.build
        failures = list(reply.get("failures") or [])
        if failures:
            log = "\n\n".join(strip_scratch(str(f.get("error"))) for f in failures)
            first = first_error(log) or (log.strip().splitlines() or ["(the compiler printed nothing)"])[0][:500]
            f = failures[0]
            raise BuildFailed(f"{first} ({f.get('fn')}({f.get('name')!r}); the compiler's whole output is in "
                              "details.build.log)", log)
        if reply.get("triton_failed"):
            log = strip_scratch(str(reply.get("trace") or reply.get("raised")))
            raise BuildFailed(f"Triton could not compile a kernel: {strip_scratch(str(reply.get('raised')))}", log)
        files = {str(safe_relative(rel)): t.numpy().tobytes() for rel, t in dict(reply.get("files") or {}).items()}
        total = max(int(reply.get("bytes") or 0), sum(len(d) for d in files.values()))  # what it says, what it sent
        if total > (b.max_artifact_mb << 20):
            raise BuildFailed(f"the built objects take {total / 2**20:.0f} MiB, over the protocol's "
                              f"{b.max_artifact_mb} MiB ([build].max_artifact_mb)", "")
        calls = list(reply.get("calls") or [])
        triton = reply.get("triton") if any(r.startswith("triton/") for r in files) else None
        manifest = {"calls": calls, "triton_root": reply.get("triton_root"), "seconds": reply.get("seconds"),
                    "compiler": compiler_text(job.toolchain, any(c.get("cuda") for c in calls), triton),
                    "flags": sorted({f for c in calls for f in c.get("flags", [])}), "toolchain": dict(job.toolchain),
                    "created_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                    "candidate_sha256": job.cand_src.sha256, "problem_sha256": job.problem_src.sha256,
                    "run_id": self.env.run_id, "pid": self.process}
        if reply.get("raised"):
            # the candidate raised before its build was complete: this item goes on with what was built (its gates
            # report the error), and nothing is cached, so that a later run builds it again
            manifest["raised"] = strip_scratch(str(reply["raised"]))
        return BuildEntry(job.key, manifest, files)
