"""Timers outside the harness, for comparison with what pytest-autotune reads on the same pairs.

    python3 benchmarks/harness/gpu/outside_timers.py dobench --report run1.json --out dobench.json
    python3 benchmarks/harness/gpu/outside_timers.py naive --problems benchmarks/harness/gpu/problems --out naive.json
    python3 benchmarks/harness/gpu/outside_timers.py mode --problems benchmarks/harness/gpu/problems --out mode.json

``dobench``: every accepted pair of a JSON report (candidate and the baseline it was measured against, A/A items
included) timed with ``triton.testing.do_bench`` (median of its reps, its own L2 flush before each rep, one
fixed input set as do_bench is normally used), in the order base, cand, cand, base; speedup = (base1 + base2) /
(cand1 + cand2). Candidates whose compiled extensions share a module name are timed in processes of their own
(``processes_for``; ``--one-process`` turns that off). ``--pin-main`` also times each pair with the main thread on the harness's sample CPU, ``--synced`` with the
host waiting for do_bench's L2 flush before it launches the call (no head start for launch-bound code). ``--rotate N`` also times each pair the way the harness feeds calls: every rep on the next of N
input sets (fresh memory each call, as pytest-autotune's distinct inputs per call), reported as ``dobench_rot``. ``naive``: the way many benchmarks read an A/A: time A (events around N back-to-back calls on
one input, no flush), then time A again (a second instance), speedup = first / second; repeated ``--trials``
times. ``mode``: which timing mode the CUDA device picks for each problem and what it reads per call.
On a machine without CUDA every timer falls back to ``time.perf_counter`` (only to test this script).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

import torch

REPO = Path(__file__).resolve().parents[3]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from pytest_autotune.problems.inputs import materialize  # noqa: E402
from pytest_autotune.problems.loader import LoadedProblem, load_class  # noqa: E402
from pytest_autotune.problems.model import SourceFile  # noqa: E402

CUDA = torch.cuda.is_available()
DEVICE = "cuda" if CUDA else "cpu"
INIT_SEED = 20260101
INPUT_SEED = 7


def _setup() -> None:
    torch.backends.cuda.matmul.allow_tf32 = False  # as the harness's CUDA device does
    torch.backends.cudnn.allow_tf32 = False
    torch.set_grad_enabled(False)


def _to_device(x: Any) -> Any:
    return x.to(DEVICE) if isinstance(x, torch.Tensor) else x


class Pair:
    """One problem with a baseline and a candidate built the way the harness builds them."""

    def __init__(self, problem_path: Path, candidate: str, baseline: str,
                 candidates: "Path | None" = None) -> None:
        self.problem = LoadedProblem.load(SourceFile.read(problem_path))
        self.sizes = self.problem.sizes_for(DEVICE)
        stem = problem_path.stem
        root = problem_path.parent

        def cls_for(name: str, folder: str) -> type:
            if name in ("reference", "reference-aa"):
                return self.problem.module.Model
            base = candidates if (candidates is not None and folder == "candidates") else root / folder
            path = base / stem / f"{name}.py"
            if not path.exists():  # a CUDA-only candidate (candidates/<problem>/cuda/: CUDA C++, Triton)
                path = base / stem / "cuda" / f"{name}.py"
            return load_class(SourceFile.read(path), "ModelNew", folder)

        with self.problem.sizes(self.sizes):
            self.base = self.problem.build(cls_for(baseline, "baselines"), INIT_SEED, "baseline").to(DEVICE)
            self.cand = self.problem.build(cls_for(candidate, "candidates"), INIT_SEED, "candidate").to(DEVICE)
        self.inputs = materialize(self.problem, {"seed": INPUT_SEED, "sizes": self.sizes}, _to_device)

    def call(self, which: str, rotate: int = 0) -> Callable[[], Any]:
        m = self.base if which == "base" else self.cand
        if rotate <= 1:
            x = self.inputs
            return lambda: m(*x)
        if not hasattr(self, "_pool"):
            self._pool = [materialize(self.problem, {"seed": INPUT_SEED + 1 + i, "sizes": self.sizes}, _to_device)
                          for i in range(rotate)]
        state = {"i": 0}

        def rotating() -> Any:
            xs = self._pool[state["i"] % len(self._pool)]
            state["i"] += 1
            return m(*xs)

        return rotating


def _do_bench(fn: Callable[[], Any]) -> float:
    """Seconds per call: triton's do_bench median (its L2 flush included) on CUDA, else a host-clock median."""
    if CUDA:
        from triton.testing import do_bench

        return float(do_bench(fn, warmup=25, rep=100, return_mode="median")) * 1e-3
    for _ in range(3):
        fn()
    ts = []
    for _ in range(20):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def _synced_bench(fn: Callable[[], Any]) -> float:
    """Seconds per call as do_bench times it (median over ~100 ms of reps, a 256 MB L2 flush before each rep),
    except that the host waits for the flush before it launches the call: do_bench records its start event behind
    the flush while the host already queues the call's launches, so a launch-bound call gets a head start the
    length of the flush. Here every launch is issued to an idle GPU, as in the harness's first call of a sample."""
    if not CUDA:
        return _do_bench(fn)
    cache = torch.empty(256 << 20, dtype=torch.int8, device=DEVICE)
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(5):
        cache.zero_()
        fn()
    torch.cuda.synchronize()
    reps = max(5, min(1000, int(0.1 / max((time.perf_counter() - t0) / 5, 1e-6))))
    times = []
    for _ in range(reps):
        cache.zero_()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e-3)
    return statistics.median(times)


def _kb_mean(fn: Callable[[], Any]) -> float:
    """Seconds per call as KernelBench's published timings were made (src/kernelbench/timing.py,
    time_execution_with_cuda_event, at 1f8d20f; written here from its description): 3 warm-up calls, then 1 + 100
    trials, each after a device-wide sync and a fresh 256 MiB fill (the L2 thrash, its launch queued ahead of the
    call), CUDA events around one call on the same inputs; the first trial discarded; the mean."""
    if not CUDA:
        return _do_bench(fn)
    for _ in range(3):
        fn()
        torch.cuda.synchronize()
    torch.cuda.empty_cache()
    times = []
    for _ in range(101):
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        dummy = torch.empty((32, 1024, 1024), dtype=torch.int64, device=DEVICE)
        dummy.fill_(42)
        del dummy
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1e-3)
    return statistics.fmean(times[1:])


def _problem_path(nodeid: str, problems: "Path | None" = None) -> Path:
    rel = Path(nodeid.split("::", 1)[0])
    if (REPO / rel).is_file() or problems is None:
        return REPO / rel
    return problems / rel.name  # a problem collected with --problems from outside the repository


#: torch.utils.cpp_extension's loaders and internals as torch made them (_use_build)
_TORCH_LOADERS: dict[str, Any] = {}


def _use_build(item: dict, build_root: Path) -> bool:
    """Load the item's compiled extensions from the plugin's build cache instead of compiling them again (a CUDA
    C++ build takes 70-80 s): the cache entry the item's build stage wrote (``details.build.key``) is written to a
    scratch folder and torch's loaders answer from it, as a candidate's sandbox does (sandbox/child_build.py).
    False where the item has no build or its entry is not in ``build_root``."""
    key = ((item.get("details") or {}).get("build") or {}).get("key")
    if not key:
        return False
    import tempfile

    import torch.utils.cpp_extension as ext

    from pytest_autotune.build.cache import BuildCache
    from pytest_autotune.sandbox.child_build import EXT_DIR, _triton_env, materialize
    from pytest_autotune.sandbox.ext_loaders import INTERNALS, LOADERS, Replayer

    entry = BuildCache(build_root).load(key)
    if entry is None:
        return False
    # torch's own loaders back before each candidate's replayer: one wrapped around the last candidate's would bind
    # its arguments to that wrapper's (*args, **kwargs) and answer for no call (every pair after the first refused)
    names = (*LOADERS, *INTERNALS)
    if not _TORCH_LOADERS:
        _TORCH_LOADERS.update({n: getattr(ext, n) for n in names if hasattr(ext, n)})
    for n, fn in _TORCH_LOADERS.items():
        setattr(ext, n, fn)
    payload = entry.payload()
    scratch = Path(tempfile.mkdtemp(prefix="dobench-built-"))
    materialize(scratch, payload["files"], payload.get("triton_root"))
    _triton_env(scratch)
    Replayer(scratch / EXT_DIR, list(payload.get("calls") or [])).install(ext)
    return True


def _abba(pair: "Pair", timer: Callable[[Callable[[], Any]], float], rotate: int = 0) -> tuple:
    """One timer on a pair in the order base, cand, cand, base: (base1 + base2) / (cand1 + cand2), the base
    seconds and the cand seconds."""
    b1 = timer(pair.call("base", rotate))
    c1 = timer(pair.call("cand", rotate))
    c2 = timer(pair.call("cand", rotate))
    b2 = timer(pair.call("base", rotate))
    return (b1 + b2) / (c1 + c2), (b1, b2), (c1, c2)


def _extension_names(item: dict) -> set[str]:
    """The module names of the item's compiled extensions (``load_inline(name=...)``, its build's calls)."""
    return {str(n) for n in (((item.get("details") or {}).get("build") or {}).get("built") or [])}


def processes_for(items: list[dict]) -> list[list[dict]]:
    """The items split into as few groups as keep every extension module name once in a group, in the report's
    order (first fit). Python keeps one extension module per name in a process: a second candidate's
    ``load_inline(name="maxpool2d")`` there returns the first candidate's module, and do_bench timed the first
    candidate's kernel under the second's name (an H100 run, 2026-12-06: three 42_Max_Pooling_2D candidates of
    the leaderboard, one name, one do_bench time). The plugin never meets this: each item's arms run in sandbox
    processes of their own."""
    groups: list[tuple[set[str], list[dict]]] = []
    for it in items:
        names = _extension_names(it)
        for taken, members in groups:
            if not names & taken:
                taken |= names
                members.append(it)
                break
        else:
            groups.append((set(names), [it]))
    return [members for _, members in groups]


def cmd_dobench(args: argparse.Namespace) -> dict:
    report = json.loads(Path(args.report).read_text())
    chosen = [it for it in report["items"]
              if args.all or (it.get("verdict") == "accepted" and it.get("speedup") is not None)]
    groups = processes_for(chosen)
    if len(groups) > 1 and not args.one_process:
        return _dobench_in_processes(args, groups)
    rows = []
    for it in chosen:
        t0 = time.perf_counter()
        try:
            built = _use_build(it, Path(args.build_root)) if args.build_root else False
            pair = Pair(_problem_path(it["nodeid"], Path(args.problems) if args.problems else None), it["candidate"],
                        it.get("baseline") or "reference", Path(args.candidates) if args.candidates else None)
            ratio, (b1, b2), (c1, c2) = _abba(pair, _do_bench)
            pinned = pinned_synced = None
            if args.pin_main:  # the main thread on the CPU the harness times on, the runtime's threads left free
                free = os.sched_getaffinity(0)
                os.sched_setaffinity(0, {max(free)})
                try:
                    pinned = _abba(pair, _do_bench)[0]
                    if args.synced:  # both: the harness's CPU and no launch head start
                        pinned_synced = _abba(pair, _synced_bench)[0]
                finally:
                    os.sched_setaffinity(0, free)
            synced, (sb1, sb2), (sc1, sc2) = _abba(pair, _synced_bench) if args.synced else (None, (0, 0), (0, 0))
            rot = _abba(pair, _do_bench, args.rotate)[0] if args.rotate > 1 else None
            kb, (kb1, kb2), (kc1, kc2) = _abba(pair, _kb_mean) if args.kb_mean else (None, (0, 0), (0, 0))
        except Exception as e:  # noqa: BLE001 - report and go on with the other pairs
            rows.append({"nodeid": it["nodeid"], "error": f"{type(e).__name__}: {e}"})
            continue
        finally:
            pair = None  # noqa: F841 - free the inputs before the next pair
            if CUDA:
                torch.cuda.empty_cache()
        db = ratio
        ours = float(it["speedup"]) if it.get("speedup") is not None else None

        def dev(other: Any) -> Any:
            return abs(math.log(ours / other)) if (ours and other) else None

        rows.append({
            "nodeid": it["nodeid"], "problem": it["problem"], "candidate": it["candidate"], "verdict": it["verdict"],
            "build": "the plugin's build cache" if built else None, "baseline": it.get("baseline"), "ours": ours, "ours_ci": it.get("ci"), "dobench": db,
            "kb_mean": kb, "kb_mean_s": {"base": [kb1, kb2], "cand": [kc1, kc2]} if kb else None,
            "abs_log_ratio_kb_mean": dev(kb),
            "dobench_s": {"base": [b1, b2], "cand": [c1, c2]}, "ours_s": {"base": it.get("baseline_s"),
                                                                            "cand": it.get("candidate_s")},
            "abs_log_ratio": dev(db), "seconds": round(time.perf_counter() - t0, 2),
            "dobench_rot": rot, "abs_log_ratio_rot": dev(rot),
            "dobench_pinned": pinned, "abs_log_ratio_pinned": dev(pinned),
            "dobench_synced": synced, "abs_log_ratio_synced": dev(synced),
            "synced_s": {"base": [sb1, sb2], "cand": [sc1, sc2]} if synced else None,
            "dobench_pinned_synced": pinned_synced,
            "abs_log_ratio_pinned_synced": dev(pinned_synced),
        })
        if getattr(args, "out", None):  # what is done so far, for a run cut short by its time limit
            Path(args.out + ".partial").write_text(json.dumps({"rows": rows}, indent=1, default=str))
        print(f"dobench {it['problem']:<24} {it['candidate']:<24} ours {ours or 0:6.3f}  do_bench {db:6.3f}  "
              f"kb-mean {kb or 0:6.3f}  "
              f"rotating {rot or 0:6.3f}  pinned {pinned or 0:6.3f}  synced {synced or 0:6.3f}  "
              f"pinned+synced {pinned_synced or 0:6.3f}", flush=True)
    return _dobench_result(rows)


def _dobench_result(rows: list[dict], processes: int = 1) -> dict:
    good = [r for r in rows if "error" not in r and r["abs_log_ratio"] is not None]
    return {"timer": "triton.testing.do_bench(median, warmup=25, rep=100)" if CUDA else "host perf_counter (no CUDA)",
            "rows": rows, "processes": processes,
            "median_abs_log_ratio": statistics.median([r["abs_log_ratio"] for r in good]) if good else None,
            "max_abs_log_ratio": max([r["abs_log_ratio"] for r in good]) if good else None}


def _dobench_in_processes(args: argparse.Namespace, groups: list[list[dict]]) -> dict:
    """One process of this script a group (:func:`processes_for`), one after another, each on a report of its
    group's items; their rows merged in the groups' order (``process``: which one timed a row). What is done so far
    is in ``OUT.partial`` after each group."""
    import subprocess
    import tempfile

    rows: list[dict] = []
    flags = [f"--{k.replace('_', '-')}" for k in ("pin_main", "synced", "kb_mean", "all") if getattr(args, k)]
    for k in ("problems", "candidates", "build_root"):
        if getattr(args, k):
            flags += [f"--{k.replace('_', '-')}", str(getattr(args, k))]
    if args.rotate:
        flags += ["--rotate", str(args.rotate)]
    with tempfile.TemporaryDirectory(prefix="dobench-groups-") as tmp:
        for i, members in enumerate(groups):
            rep, out = Path(tmp) / f"report-{i}.json", Path(tmp) / f"dobench-{i}.json"
            rep.write_text(json.dumps({"items": members}))
            proc = subprocess.run([sys.executable, __file__, "dobench", "--one-process", "--report", str(rep),
                                   "--out", str(out), *flags], check=False)
            got = json.loads(out.read_text())["rows"] if out.exists() else [
                {"nodeid": it["nodeid"], "error": f"its do_bench process exited with {proc.returncode}"}
                for it in members]
            rows += [{**r, "process": i} for r in got]
            if getattr(args, "out", None):
                Path(args.out + ".partial").write_text(json.dumps({"rows": rows}, indent=1, default=str))
    return _dobench_result(rows, len(groups))


def _naive_time(fn: Callable[[], Any], calls: int) -> float:
    for _ in range(3):
        fn()
    if CUDA:
        torch.cuda.synchronize()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(calls):
            fn()
        e.record()
        torch.cuda.synchronize()
        return s.elapsed_time(e) * 1e-3 / calls
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t0) / calls


def cmd_naive(args: argparse.Namespace) -> dict:
    out = {"method": f"events around {args.calls} back-to-back calls on one input, no flush; A then A again "
                     "(a second instance); speedup = time(first) / time(second)", "problems": {}}
    for path in sorted(Path(args.problems).glob("*.py")):
        pair = Pair(path, "reference-aa", "reference")
        ratios, firsts = [], []
        for _ in range(args.trials):
            t1 = _naive_time(pair.call("base"), args.calls)
            t2 = _naive_time(pair.call("cand"), args.calls)
            ratios.append(t1 / t2)
            firsts.append(t1)
        out["problems"][path.stem] = {
            "per_call_s": statistics.median(firsts), "trials": args.trials, "ratios": ratios,
            "median": statistics.median(ratios), "min": min(ratios), "max": max(ratios),
        }
        print(f"naive A/A {path.stem:<16} per call {statistics.median(firsts) * 1e6:8.2f} us  "
              f"median {statistics.median(ratios):.4f}  range {min(ratios):.4f}-{max(ratios):.4f}", flush=True)
        del pair
    return out


def cmd_mode(args: argparse.Namespace) -> dict:
    """Timing mode the CUDA device picks, calibrating the way the schedule does (3 single-call samples per arm,
    then samples of k calls)."""
    out: dict[str, Any] = {"problems": {}}
    if not CUDA:
        out["skipped"] = "no CUDA"
        return out
    from pytest_autotune.measure.devices.cuda import CudaDevice
    from pytest_autotune.protocol import find_protocol, load_protocol

    proto = load_protocol(find_protocol(REPO))
    opts = {"l2_flush_factor": proto.devices.cuda.l2_flush_factor, "graph_below_s": proto.devices.cuda.graph_below_s}
    for path in sorted(Path(args.problems).glob("*.py")):
        pair = Pair(path, "reference-aa", "reference")
        dev = CudaDevice(0, opts)
        dev.setup(1)
        dev.warm_runtime()
        fresh = lambda p=pair: materialize(p.problem, {"seed": INPUT_SEED, "sizes": p.sizes}, _to_device)  # noqa: E731
        per_arm = {}
        for name, m in (("base", pair.base), ("cand", pair.cand)):
            per_arm[name] = statistics.median(dev.timed(m, [fresh()]).seconds for _ in range(3))
        k = int(min(max(math.ceil(proto.timing.min_sample_s / max(min(per_arm.values()), 1e-9)), 1),
                    proto.timing.max_calls_per_sample))
        batches = [fresh() for _ in range(k)]
        samples = []
        for m in (pair.base, pair.cand, pair.cand, pair.base) * 3:
            s = dev.timed(m, batches)
            samples.append((s.seconds, s.host_seconds))
            del s
        info = dev.timing_info()
        info.update(calls_per_sample=k, calibration_s=per_arm,
                    per_call_s=statistics.median(ev for ev, _ in samples) / k,
                    host_over_event=statistics.median(h / ev for ev, h in samples))
        out["problems"][path.stem] = info
        print(f"mode {path.stem:<16} {info['mode']:<6} k={k:<3} per call {info['per_call_s'] * 1e6:8.2f} us  "
              f"({info['reason']})", flush=True)
        del pair, dev, batches, samples
        torch.cuda.empty_cache()
    return out


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("dobench")
    d.add_argument("--report", required=True)
    d.add_argument("--problems", default=None, help="where problems collected with --problems live (their nodeids "
                   "name them relative to the run's rootdir)")
    d.add_argument("--candidates", default=None, help="the candidates folder of the run (--candidates), if not the "
                   "problems' own candidates/")
    d.add_argument("--build-root", default=None, help="the plugin's build cache (.autotune/build): compiled "
                   "candidates load their build from it instead of compiling again")
    d.add_argument("--rotate", type=int, default=0, help="also time every rep on the next of N input sets")
    d.add_argument("--pin-main", action="store_true",
                   help="also time each pair with the main thread on the harness's sample CPU (the last allowed "
                        "CPU, [timing].pin): launch-bound pairs read differently by CPU (launch_probe.py)")
    d.add_argument("--synced", action="store_true",
                   help="also time each pair as do_bench does but with the host waiting for the L2 flush before it "
                        "launches the call (_synced_bench): shows whether a gap is do_bench's launch head start")
    d.add_argument("--kb-mean", action="store_true",
                   help="also time each pair as KernelBench's published timings were made (mean of 100 trials)")
    d.add_argument("--all", action="store_true", help="every item of the report, not only the accepted ones")
    d.add_argument("--one-process", action="store_true",
                   help="time every pair in this process even where two candidates' extensions share a module "
                        "name (by default such pairs go to processes of their own: processes_for)")
    d.add_argument("--out", required=True)
    n = sub.add_parser("naive")
    n.add_argument("--problems", required=True)
    n.add_argument("--out", required=True)
    n.add_argument("--trials", type=int, default=20)
    n.add_argument("--calls", type=int, default=100)
    m = sub.add_parser("mode")
    m.add_argument("--problems", required=True)
    m.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    _setup()
    result = {"cmd": args.cmd, "device": torch.cuda.get_device_name(0) if CUDA else "cpu",
              "torch": torch.__version__, "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    if CUDA:
        import triton

        result["triton"] = triton.__version__
    result.update({"dobench": cmd_dobench, "naive": cmd_naive, "mode": cmd_mode}[args.cmd](args))
    Path(args.out).write_text(json.dumps(result, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
