"""The build stage in an item's flow (docs/architecture.md#the-flow; docs/guide/compiled-candidates.md):
load -> **build** -> correctness -> probes -> timing.

A candidate whose source names a compiling API (:mod:`.detect`) is built once per item, before anything else runs
it: the controller looks up the cache key (:mod:`.toolchain`) in the build cache (:mod:`.cache`); on a miss one build
sandbox -- jailed like every sandbox, with ``[build]``'s time, memory and process budget and no CPU pinning (its
compilers may use every core) -- imports the candidate, builds ``ModelNew`` and runs it once, and sends back what it
built; the controller digests it and writes the cache entry. Every later candidate sandbox of the item gets the
entry in its init message (:meth:`BuildStage.build_payload`); the baseline's never does. A compiler that failed
refuses the item: ``REJECTED by build: <the compiler's first error>``, the whole log in ``details.build.log`` and in
the store's rejection row. The stage's time is the item's, never its timing budget's.
"""

from __future__ import annotations

import datetime as _dt
import time
from typing import TYPE_CHECKING, Any, Optional

from ..errors import ProblemLoadError
from ..gates.base import GateOutcome
from ..item_memory import settle
from ..sandbox.runner import SandboxFailure
from .cache import BuildCache, BuildEntry, CacheError, safe_relative
from .compiler_log import first_error, keep, strip_scratch
from .detect import needs_build
from .toolchain import build_key, compiler_text, device_arch, toolchain

if TYPE_CHECKING:  # pragma: no cover
    from ..item_run import FlowEnv, FlowVerdict, ItemRun
    from ..problems.model import SourceFile


class BuildFailed(Exception):
    """The build refused the item: ``reason`` for the report, ``log`` the compilers' whole output."""

    def __init__(self, reason: str, log: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.log = log


class BuildStage:
    """Mixed into :class:`~pytest_autotune.flow.KernelFlow` (as the baseline stage is)."""

    env: "FlowEnv"

    def _init(self, problem_src: "SourceFile", sizes: dict, init_seed: int, role: str,
              source: Optional["SourceFile"], class_name: str) -> dict:  # pragma: no cover - KernelFlow's
        raise NotImplementedError

    def _refused(self, item: "ItemRun", refused: GateOutcome) -> "FlowVerdict":  # pragma: no cover - KernelFlow's
        raise NotImplementedError

    def build_payload(self, problem_src: "SourceFile", role: str, source: Optional["SourceFile"]) -> Optional[dict]:
        """The item's build for a candidate sandbox's init message; None for every other sandbox."""
        if role != "candidate" or source is None:
            return None
        return self.env.builds.get((problem_src.sha256, source.sha256))

    def build(self, item: "ItemRun") -> Optional["FlowVerdict"]:
        """Build the item's candidate once (or find its build in the cache). None: go on (nothing to build, or
        built); a verdict: the build refused the item or could not be run."""
        env, ctx, src = self.env, item.ctx, item.cand_src
        if src is None or env.device.framework != "torch" or not needs_build(src.source):
            return None
        env.builds.pop((item.problem_src.sha256, src.sha256), None)
        t0 = time.perf_counter()
        tc = toolchain(env.device_spec.name, device_arch(env.device_spec.name, env.device.fingerprint()))
        key = build_key(src.sha256, item.problem_src.sha256, item.sizes, env.device_spec.name, tc)
        info: dict[str, Any] = {"key": key, "cache": "miss"}
        ctx.details["build"] = info
        cache = BuildCache(env.build_root) if env.build_root is not None else None
        entry = None
        if cache is not None:
            try:
                entry = cache.load(key)
            except CacheError as e:
                ctx.warnings.append(f"the build cache's entry {key[:16]} could not be used and was built again: {e}")
        if entry is not None:
            info["cache"] = "hit"
        else:
            try:
                entry = self._build_in_sandbox(item, key, tc, cache, info)
            except BuildFailed as e:
                info.update(seconds=round(time.perf_counter() - t0, 3), log=keep(e.log))
                return self._refused(item, GateOutcome.refuse("build", e.reason))
            except SandboxFailure as e:
                info["seconds"] = round(time.perf_counter() - t0, 3)
                return self._refused(item, GateOutcome("build", f"the build sandbox: {e}", verdict="error"))
        m = entry.manifest
        info.update(seconds=round(time.perf_counter() - t0, 3), compiler=m.get("compiler"), flags=m.get("flags", []),
                    built=[c.get("name") for c in m.get("calls", [])], build_seconds=m.get("seconds"),
                    bytes=sum(len(d) for d in entry.files.values()))
        if m.get("raised"):
            info["raised"] = m["raised"]
        env.builds.clear()  # items run one at a time in a process: only this item's build is kept
        env.builds[(item.problem_src.sha256, src.sha256)] = entry.payload()
        ctx.details.setdefault("stage_seconds", {})["build"] = info["seconds"]
        return None

    def _build_in_sandbox(self, item: "ItemRun", key: str, tc: tuple, cache: Optional[BuildCache],
                          info: dict) -> BuildEntry:
        env, spec = self.env, item.spec
        b = env.protocol.build
        init = self._init(item.problem_src, item.sizes, item.init_seed, "build", item.cand_src,
                          spec.candidate.class_name)
        with env.lock.shared():
            box = env.pool.start(init, label=f"{spec.item_key}-build", memory_mb=b.memory_mb,
                                 max_processes=b.max_processes, limits_key="[build]")
        item.boxes["build"] = box
        with box:
            if not box.hello.get("ok"):
                raise ProblemLoadError(box.hello.get("path") or "sandbox", box.hello.get("error", "load failed"))
            with env.lock.shared():
                reply = box.request({"cmd": "build", "seed": item.ctx.seeds.seed("build"),
                                     "max_bytes": b.max_artifact_mb << 20}, timeout=b.timeout_s, phase="build")
        settle(env, item, "the build sandbox")
        if not reply.get("ok"):
            raise SandboxFailure("protocol", f"the build command failed: {reply.get('error')}",
                                 str(reply.get("trace") or ""))
        try:
            entry = self._entry(item, key, tc, reply)
        except (AttributeError, TypeError, ValueError, IndexError, KeyError) as e:
            # the reply is the candidate's process speaking: a shape it should not have is the sandbox's failure,
            # with a verdict, never the controller's traceback
            raise SandboxFailure("protocol", f"the build sandbox's reply was malformed ({type(e).__name__}: {e})") \
                from None
        if entry.manifest.get("raised") or cache is None:
            return entry
        try:
            return cache.store(key, entry.manifest, entry.files)
        except OSError as e:  # a full disk, a cache folder the user cannot write: the item goes on uncached
            item.ctx.warnings.append(f"the build of {key[:16]} could not be cached ({e}); it is used for this item "
                                     "and built again next time: free space or fix the permissions of the build "
                                     "cache folder (docs/guide/compiled-candidates.md)")
            return entry

    def _entry(self, item: "ItemRun", key: str, tc: tuple, reply: dict) -> BuildEntry:
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
                    "compiler": compiler_text(tc, any(c.get("cuda") for c in calls), triton),
                    "flags": sorted({f for c in calls for f in c.get("flags", [])}), "toolchain": dict(tc),
                    "created_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                    "candidate_sha256": item.cand_src.sha256 if item.cand_src else None,
                    "problem_sha256": item.problem_src.sha256}
        if reply.get("raised"):
            # the candidate raised before its build was complete: this item goes on with what was built (its gates
            # report the error), and nothing is cached, so that a later run builds it again
            manifest["raised"] = strip_scratch(str(reply["raised"]))
        return BuildEntry(key, manifest, files)
