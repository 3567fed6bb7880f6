"""The build stage in an item's flow (docs/architecture.md#the-flow; docs/guide/compiled-candidates.md):
load -> **build** -> correctness -> probes -> timing.

A candidate whose source names a compiling API (:mod:`.detect`) is built once, before anything else runs it. The
session's build pool (:mod:`.pool`) builds every selected item's candidate before the first item runs; the item then
reads its build from the cache (``details.build.built_by`` = "pool", ``cache`` = "hit"). An item whose build the pool
did not make (no pool, a file changed since) looks up its key (:mod:`.toolchain`) in the build cache (:mod:`.cache`)
and on a miss runs one build sandbox itself (:mod:`.builder`: jailed like every sandbox, with ``[build]``'s time,
memory and process budget and no CPU pinning). Every later candidate sandbox of the item gets the entry in its init
message (:meth:`BuildStage.build_payload`); the baseline's never does. A compiler that failed refuses the item:
``REJECTED by build: <the compiler's first error>``, the whole log in ``details.build.log`` and in the store's
rejection row. The stage's time is the item's, never its timing budget's.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Optional

from ..errors import ProblemLoadError
from ..gates.base import GateOutcome
from ..item_memory import settle
from ..problems.model import SourceFile
from ..seeds import SeedSource, problem_init_seed
from .builder import Builder, BuildJob, BuildResult
from .compiler_log import keep
from .detect import needs_build
from .toolchain import build_key, device_arch, toolchain

if TYPE_CHECKING:  # pragma: no cover
    from ..item_run import FlowEnv, FlowVerdict, ItemRun
    from ..problems.loader import LoadedProblem
    from ..problems.model import KernelItemSpec

__all__ = ["BuildStage"]


class BuildStage:
    """Mixed into :class:`~pytest_autotune.flow.KernelFlow` (as the baseline stage is)."""

    env: "FlowEnv"

    def _init(self, problem_src: "SourceFile", sizes: dict, init_seed: int, role: str,
              source: Optional["SourceFile"], class_name: str) -> dict:  # pragma: no cover - KernelFlow's
        raise NotImplementedError

    def _refused(self, item: "ItemRun", refused: GateOutcome) -> "FlowVerdict":  # pragma: no cover - KernelFlow's
        raise NotImplementedError

    def _load_problem(self, src: "SourceFile") -> "LoadedProblem":  # pragma: no cover - KernelFlow's
        raise NotImplementedError

    def build_payload(self, problem_src: "SourceFile", role: str, source: Optional["SourceFile"]) -> Optional[dict]:
        """The item's build for a candidate sandbox's init message; None for every other sandbox."""
        if role != "candidate" or source is None:
            return None
        return self.env.builds.get((problem_src.sha256, source.sha256))

    def build_init(self, job: BuildJob) -> dict:
        """The build sandbox's init message for ``job``."""
        return self._init(job.problem_src, job.sizes, job.init_seed, "build", job.cand_src, job.class_name)

    def builder(self) -> Builder:
        return Builder(self.env, self.build_init)

    def _job(self, problem_src: "SourceFile", cand_src: "SourceFile", sizes: dict, init_seed: int, seed: int,
             class_name: str, label: str) -> BuildJob:
        env = self.env
        tc = toolchain(env.device_spec.name, device_arch(env.device_spec.name, env.device.fingerprint()))
        key = build_key(cand_src.sha256, problem_src.sha256, sizes, env.device_spec.name, tc)
        return BuildJob(key, tc, problem_src, cand_src, sizes, init_seed, seed, class_name, label)

    def build_job(self, spec: "KernelItemSpec") -> Optional[BuildJob]:
        """The build an item of ``spec`` will need, as its flow would compute it (the build pool's, before the item
        runs); None when its candidate has no build stage or its files cannot be read or loaded (the item reports
        that itself)."""
        env = self.env
        if spec.candidate.path is None or env.device.framework != "torch":
            return None
        try:
            cand_src = SourceFile.read(spec.candidate.path)
            if not needs_build(cand_src.source):
                return None
            problem_src = SourceFile.read(spec.problem.path)
            sizes = self._load_problem(problem_src).sizes_for(spec.device)
        except (OSError, ProblemLoadError):
            return None
        return self._job(problem_src, cand_src, sizes, problem_init_seed(env.nonce, spec.problem.name, spec.device),
                         SeedSource(env.nonce, spec.item_key).seed("build"), spec.candidate.class_name, spec.item_key)

    def build(self, item: "ItemRun") -> Optional["FlowVerdict"]:
        """The item's candidate built (by the pool, an earlier session, or here). None: go on (nothing to build, or
        built); a verdict: the build refused the item or could not be run."""
        env, ctx, src = self.env, item.ctx, item.cand_src
        if src is None or env.device.framework != "torch" or not needs_build(src.source):
            return None
        env.builds.pop((item.problem_src.sha256, src.sha256), None)
        t0 = time.perf_counter()
        job = self._job(item.problem_src, src, item.sizes, item.init_seed, ctx.seeds.seed("build"),
                        item.spec.candidate.class_name, item.spec.item_key)
        info: dict[str, Any] = {"key": job.key, "cache": "miss"}
        ctx.details["build"] = info
        builder = self.builder()
        result, entry = self._prebuilt(item, builder, job, info)
        if result is None:
            result = builder.obtain(job, block=True, built_by="item", keep_bytes=True)
            assert result is not None  # a blocking wait always ends with a result
            ctx.warnings.extend(result.warnings)
            if result.box is not None:
                item.boxes["build"] = result.box
                settle(env, item, "the build sandbox")
            entry = result.entry
        info["built_by"] = result.built_by
        if result.failure is not None or entry is None:
            info.update(seconds=round(time.perf_counter() - t0, 3), log=keep(result.log))
            return self._refused(item, result.failure or GateOutcome("build", "the build has gone", verdict="error"))
        if result.where == "cache" and result.built_by != "item":
            info["cache"] = "hit"
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

    def _prebuilt(self, item: "ItemRun", builder: Builder, job: BuildJob,
                  info: dict) -> tuple[Optional[BuildResult], Any]:
        """What the session's build pool made of this item's key, with its entry read back from where it lies;
        (None, None) when the pool did not build it or its entry has gone since (the item then builds it)."""
        pre = self.env.prebuilt.get(job.key)
        if pre is None:
            return None, None
        info["pool"] = {**pre.pool, "seconds": round(pre.seconds, 3), "waited_s": round(pre.waited_s, 3),
                        "queued_s": round(pre.queued_s, 3)}
        item.ctx.warnings.extend(pre.warnings)
        if pre.box is not None:
            item.boxes["build"] = pre.box
        if pre.failure is not None:
            return pre, None
        entry = builder.load(pre)
        if entry is None:
            item.ctx.warnings.append(f"the build pool's entry {job.key[:16]} could not be read back; the item built it "
                                     "again (docs/guide/compiled-candidates.md)")
            item.boxes.pop("build", None)
            return None, None
        return pre, entry
