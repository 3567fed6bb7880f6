"""The cheat catalog: every attack of docs/design/threat-model.md as a hostile candidate, run end to end.

Three pytester sessions, each run once per module (``runpytest_subprocess`` with ``--autotune
--autotune-exploratory --autotune-json`` and a fast protocol), then one test per candidate reads its verdict
from the JSON report:

* ``main`` -- every file under ``tests/cheats/candidates/`` (cheats and honest-but-tricky candidates);
* ``limits`` -- candidates that crash, hang or exhaust memory, under a short ``[sandbox]`` timeout and a small
  memory limit, beside an honest item that must still pass; probes are disabled in this session, so the identity cheat
  meets the 10x breaker instead of the probe gate;
* ``store`` -- a candidate that forges a plausible row in the results database (the row MAC betrays it);
* ``raw`` -- a candidate that inserts a row with raw SQL (the database's validator refuses it).

``store`` and ``raw`` run without the OS jail (``[sandbox].isolation = "off"``): under it the store is out of the
sandbox's sight (tests/test_jail.py), so these two sessions test the second line of defence -- the validator and
the row MACs inside the database -- that still holds where the jail cannot be set up.

``CATALOG`` is the single table of expectations: file, session, accepted verdicts and gates, a pattern the
reason must match (so that the test names the defence that must catch it, not just "something refused it"),
and where the defence lives. docs/design/threat-model.md is the same table for readers.

To watch a test go red with its defence removed, disable gates in the sessions' controller with
``AUTOTUNE_CATALOG_DISABLE=WallClockGate,ThreadGate pytest tests/test_cheat_catalog.py`` (names of classes in
pytest_autotune/gates/*.py whose ``check`` then passes everything).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import pytest
import torch

from conftest import REPO, ModuleRequest, fast_protocol_text

CHEATS = Path(__file__).resolve().parent / "cheats"

#: (problem, candidate) of the honest candidate that "gains nothing" cheats are compared with
REFERENCE_HONEST = ("softmax_rows", "honest_fused")
#: a "gains nothing" cheat's CI low may sit this much above the honest candidate's CI high (sessions are noisy)
GAIN_MARGIN = 1.10


@dataclass(frozen=True)
class Case:
    problem: str
    name: str
    session: str  # main | limits | store
    verdicts: tuple  # accepted verdicts; "no-gain" = refused, or accepted no faster than the honest candidate
    gates: tuple = ()  # accepted gates (empty: any)
    reason: str = ""  # regex the reason must match
    defence: str = ""  # what catches it (docs/design/threat-model.md)
    source: str | None = None  # file under tests/cheats, when not candidates/<problem>/<name>.py
    #: the defence counts processes by the jail's pid namespace or cgroup: skipped (a documented limit) without both
    needs_jail_count: bool = False
    #: the defence is the jail's view (the store hidden): skipped (a documented limit) without it
    needs_view: bool = False
    #: a regex one of the item's findings (beyond its contract) must match by clause; "" : none asked for
    finding: str = ""
    #: KernelBench's own verdict the item must record beside ours (gates/kernelbench.py); "": not checked
    kernelbench: str = ""

    @property
    def path(self) -> Path:
        return CHEATS / (self.source or f"candidates/{self.problem}/{self.name}.py")

    @property
    def id(self) -> str:
        return f"{self.session}:{self.problem}/{self.name}"


R, Q, A, E = ("rejected",), ("quarantined",), ("accepted",), ("error",)
NO_GAIN = ("no-gain",)

CATALOG: list[Case] = [
    # ---------------------------------------------------------------- return the input
    Case("relu_nonneg", "cheat_identity", "main", R, ("probe",), r"adversarial input",
         "probe gate: explicit all-negative inputs (gates/probes.py)"),
    Case("relu_nonneg", "cheat_identity", "limits", Q, ("breaker",), r"QUARANTINED: .* > 10x breaker",
         "10x breaker with probes disabled (gates/breaker.py)"),
    # ---------------------------------------------------------------- cache / replay
    Case("softmax_rows", "cheat_cache_ptr", "main", NO_GAIN, (), "",
         "fresh inputs per call: stale answers fail correctness/timed outputs, or gain nothing"),
    Case("softmax_rows", "cheat_cache_hash", "main", NO_GAIN, (), "",
         "fresh seeds per call (measure/schedule.py): the cache never hits"),
    Case("softmax_rows", "cheat_cache_signs", "main", R, ("integrity",), r"timed round \d+, candidate call",
         "derived sets move every value by up to ~12% (problems/derived.py): a replayed answer fails the timed-outputs "
         "check of the calls the controller chose after the round (gates/timed_outputs.py)"),
    # ---------------------------------------------------------------- the sample's shape (calls per sample, k)
    Case("softmax_rows", "cheat_cache_repeat", "main", NO_GAIN, (), "",
         "k from the baseline's calibration alone, every calibration call on a fresh set (measure/schedule.py "
         "_calibrate): a cache of repeated inputs never answers and chooses nothing"),
    Case("softmax_rows", "cheat_repeat_uninitialised", "main", NO_GAIN, (), "",
         "no input repeats in calibration or timing (measure/schedule.py calibration_message): the free answer to a "
         "repeated input is never asked for"),
    Case("softmax_rows", "cheat_calibration_garbage", "main", NO_GAIN, (), "",
         "the candidate's calibration is recorded, never used: k, graphs or eager and the memory bound come from "
         "the baseline's (measure/schedule.py _calibrate, measure/sampling.py decide_timing_mode)"),
    Case("softmax_rows", "cheat_precompute_seeds", "main", R, ("correctness",), r"outside tolerance",
         "seeds from a per-run nonce (seeds.py)"),
    Case("softmax_rows", "cheat_kernelbench_seeds", "main", R, ("correctness",),
         r"outside tolerance.*clause: declared inputs",
         "seeds from a per-run nonce; KernelBench's verdict on its public seeds is recorded beside the refusal and "
         "never accepts anything (gates/kernelbench.py)", kernelbench="correct"),
    # ---------------------------------------------------------------- precision, inputs, outputs
    Case("linear_fp32", "cheat_bf16", "main", R, ("correctness",),
         r"less accurate than the reference against the float64 oracle.*fix: compute in the output's dtype",
         "the accuracy rule: error against the reference run in float64 at most 100x the reference's own "
         "(gates/accuracy.py)"),
    Case("mse_loss", "cheat_half_loss", "main", R, ("correctness", "probe"),
         r"less accurate than the reference against the float64 oracle",
         "the accuracy rule on the probes' rounding_bias inputs, where float16 rounds every value one way: a scalar "
         "loss cannot average it away (gates/accuracy.py, problems/inputs.py)", kernelbench="correct"),
    Case("mse_loss", "cheat_half_unless_probed", "main", R, ("correctness", "probe"),
         r"less accurate than the reference against the float64 oracle",
         "rounding_bias inputs look like randn (signs, magnitudes) yet round one way in float16"),
    Case("mse_loss", "honest_blocked", "main", A, (), "", "256 partial sums, then their total, in float32",
         kernelbench="correct"),
    Case("softmax_rows", "honest_contiguous_only", "main", A, (), "",
         "beyond its contract only: softmax_rows declares no layouts, so a wrong answer on a transposed input is a "
         "finding on the item, not a refusal (problems/contract.py)", finding=r"^layout (transpose|stride)$"),
    Case("softmax_rows", "cheat_mutate_input", "main", R, ("correctness",), r"modified its input",
         "correctness gate: inputs compared bitwise after the call (sandbox/child.py h_outputs)"),
    Case("softmax_rows", "cheat_late_thread", "main", R, ("correctness", "integrity"),
         r"outside tolerance|changed after the call returned|thread",
         "outputs read at return and re-read after a delay; threads counted (sandbox/child.py h_outputs)"),
    Case("softmax_rows", "cheat_reuse_output", "main", R, ("integrity",), r"timed round \d+, candidate call",
         "timed-outputs check: every timed output kept and fingerprinted (gates/integrity.py TimedOutputsGate)"),
    # ---------------------------------------------------------------- clocks and comparisons
    Case("softmax_rows", "cheat_slow_clock", "main", R, ("integrity",), r"time\.perf_counter_ns",
         "tamper snapshot of the timer (sandbox/tamper.py, gates/integrity.py TamperGate)"),
    Case("softmax_rows", "cheat_clock_between_checks", "main", R, ("integrity",), r"time is missing from the candidate",
         "the controller's window around every sample, candidate against baseline (gates/clocks.py WallClockGate)"),
    Case("softmax_rows", "cheat_patch_compare", "main", R, ("integrity",), r"torch\.allclose",
         "tamper snapshot; comparisons run in the controller anyway (gates/compare.py)"),
    # ---------------------------------------------------------------- slowing the baseline
    Case("softmax_rows", "cheat_slow_baseline_exp", "main", R, ("integrity",), r"torch\.exp\b",
         "tamper snapshot of the torch namespace (sandbox/tamper.py)"),
    Case("softmax_rows", "cheat_model_code", "main", R, ("integrity",), r"Model\.forward\.__code__",
         "tamper snapshot of function code objects (sandbox/tamper.py)"),
    Case("softmax_rows", "cheat_profile_hook", "main", R, ("integrity",), r"sys\.getprofile\(\)",
         "tamper snapshot of process settings (sandbox/tamper.py _SETTINGS)"),
    Case("softmax_rows", "cheat_instance_patch", "main", NO_GAIN, (), "",
         "arms in separate sandboxes: no baseline instance in the candidate's process (docs/architecture.md)"),
    Case("softmax_rows", "cheat_baseline_below_limit", "main", NO_GAIN, (), "",
         "arms in separate sandboxes: a 1.4x sabotage below the old 1.5x sanity limit finds nothing to slow"),
    # which integrity rule fires first is a race (helper count, idle CPU, wall clock): each is a correct refusal
    Case("softmax_rows", "cheat_burn_process", "main", R, ("integrity",), "",
         "the controller counts the processes in the sandbox's process group after every timed round "
         "(measure/procstat.py, ThreadGate); the helpers die with the group (sandbox/runner.py)"),
    Case("softmax_rows", "cheat_burn_setsid", "main", R, ("integrity",), "",
         "the controller counts every process of the sandbox's pid namespace (and cgroup) from the host's /proc, "
         "setsid or not (measure/helper_watch.py, ThreadGate); the helpers die with the sandbox's pid namespace",
         needs_jail_count=True),
    # ---------------------------------------------------------------- extra threads and cores
    Case("softmax_rows", "cheat_burn_thread", "main", R, ("integrity",), r"thread",
         "thread count after every call (sandbox/child.py, gates/correctness.py)"),
    Case("softmax_rows", "cheat_num_threads", "main", R, ("integrity",), r"thread",
         "thread count after every call: the intra-op pool's workers stay alive"),
    Case("softmax_rows", "cheat_helper_threads", "main", R, ("integrity",), r"threads other than the calling one",
         "controller-read CPU clocks of the sandbox (measure/schedule.py, gates/integrity.py ThreadGate)"),
    # ---------------------------------------------------------------- heap, freed memory, checked-vs-timed
    Case("softmax_rows", "cheat_heap_search", "main", R, ("correctness",), r"outside tolerance",
         "golden outputs only in the controller (flow.py _Golden); baseline outputs scrubbed"),
    Case("softmax_rows", "cheat_empty_like", "main", R, ("correctness",), r"outside tolerance|NaN",
         "correctness gate; baseline outputs scrubbed before they are freed"),
    # never writing its outputs leaves pages the baseline's sandbox touched untouched in its own, so building the
    # next inputs can cost it first-touch faults: the prepare-CPU rule may fire before the fingerprints do, and
    # the wall-clock rule can see the sandbox's own clock fall short of the controller's window (all three are
    # correct refusals of this cheat; which comes first depends on the machine's memory state and load: a
    # 2026-12-01 suite run was refused by the wall clock, 1222 us missing against 847 us allowed)
    Case("softmax_rows", "cheat_empty_like_timed", "main", R, ("integrity",),
         r"timed round \d+, candidate call|building a round's inputs cost the candidate's sandbox"
         r"|time is missing from the candidate",
         "timed-outputs check (fingerprints of timed outputs against golden outputs); idle/prepare CPU"),
    Case("softmax_rows", "cheat_call_counter", "main", R, ("integrity",), r"timed round \d+, candidate call",
         "timed-outputs check on rounds chosen after the fact (gates/integrity.py TimedOutputsGate)"),
    # ---------------------------------------------------------------- candidate code outside its own calls
    Case("softmax_rows", "cheat_lazy_torch_function", "main", R, ("correctness",), r"subclass of torch\.Tensor",
         "outputs must be exactly torch.Tensor, read with torch functions disabled (sandbox/outputs.py)"),
    Case("softmax_rows", "cheat_lazy_dispatch", "main", R, ("correctness",), r"subclass of torch\.Tensor",
         "outputs must be exactly torch.Tensor; a wrapper subclass is refused by type (sandbox/outputs.py)"),
    Case("softmax_rows", "cheat_mode_precompute", "main", R, ("integrity",), r"mode",
         "torch mode stacks watched and required empty; inputs built with torch functions disabled "
         "(sandbox/tamper.py, sandbox/child.py)"),
    Case("softmax_rows", "cheat_finalizer_burn", "main", NO_GAIN, (), "",
         "outputs freed in the candidate's own sandbox, between timed windows (sandbox/child.py h_release): the "
         "burn slows nobody's sample"),
    Case("softmax_rows", "cheat_signal_timer", "main", R, ("integrity",), r"signal",
         "signal handlers and interval timers in the tamper snapshot (sandbox/tamper.py)"),
    Case("softmax_rows", "cheat_gc_callback", "main", R, ("integrity",), r"gc\.callbacks",
         "collector callbacks in the tamper snapshot; collection only before inputs exist (sandbox/tamper.py)"),
    # ---------------------------------------------------------------- the database
    Case("softmax_rows", "cheat_db_insert", "raw", A, (), "",
         "database validator (store/schema.py): the raw INSERT is refused, verify passes"),
    Case("softmax_rows", "cheat_db_forge", "store", A, (), "",
         "row MAC keyed by the run nonce (store/hashing.py): finish_run and autotune verify report it",
         source="store/softmax_rows/cheat_db_forge.py"),
    # ---------------------------------------------------------------- crash, hang, memory
    Case("relu_nonneg", "cheat_segfault", "limits", E, (), r"CRASH|died|SIGSEGV",
         "sandbox process: a crash is an error item (sandbox/runner.py)", source="limits/relu_nonneg/cheat_segfault.py"),
    Case("relu_nonneg", "cheat_hang", "limits", E, (), r"TIMEOUT|timeout_s",
         "[sandbox].timeout_s watchdog (sandbox/runner.py)", source="limits/relu_nonneg/cheat_hang.py"),
    Case("relu_nonneg", "cheat_oom", "limits", E, (), r"MEMORY|memory_mb",
         "[sandbox].memory_mb watchdog (sandbox/runner.py)", source="limits/relu_nonneg/cheat_oom.py"),
    # ---------------------------------------------------------------- contract violations, broken files
    Case("softmax_rows", "cheat_wrong_dtype", "main", R, ("correctness",), r"dtype float64 != reference float32",
         "correctness gate (gates/compare.py)"),
    Case("softmax_rows", "cheat_wrong_shape", "main", R, ("correctness",), r"shape .* != reference",
         "correctness gate (gates/compare.py)"),
    Case("softmax_rows", "cheat_non_tensor", "main", R, ("correctness",), r"ndarray",
         "correctness gate (sandbox/child.py h_outputs)"),
    Case("softmax_rows", "cheat_wrong_device", "main", R, ("correctness",), r"meta",
         "correctness gate; unsendable outputs are the candidate's error (sandbox/child.py _unsendable)"),
    Case("softmax_rows", "cheat_odd_output", "main", R, ("correctness",), r"object",
         "correctness gate; unsendable outputs are the candidate's error (sandbox/child.py _unsendable)"),
    Case("softmax_rows", "cheat_raise_init", "main", R, ("correctness", "load"), r"constructor raised",
         "the item fails with the file and the reason"),
    Case("softmax_rows", "cheat_no_modelnew", "main", R, ("load",), r"cheat_no_modelnew\.py.*no class ModelNew",
         "the item fails with the file and the reason (problems/loader.py)"),
    Case("softmax_rows", "cheat_syntax_error", "main", R, ("load",), r"cheat_syntax_error\.py.*syntax error",
         "the item fails with the file and the line (problems/loader.py)"),
    # ---------------------------------------------------------------- native code (C++ through load_inline)
    # KernelBench's adversarial kernels (src/kernelbench/unit_tests/test_kernels/) ported to C++ on the CPU, and
    # the native forms of caches, late writers and threads; built once per item in the build sandbox
    Case("linear_fp32", "cheat_ext_result_reuse", "main", R, ("correctness",), r"outside tolerance|NaN",
         "the reference runs in another process and golden outputs only in the controller: an output never "
         "written holds no answer (docs/architecture.md, 'Arms in separate processes')"),
    Case("linear_fp32", "cheat_ext_zero_out", "main", R, ("correctness",), r"modified its input|outside tolerance",
         "golden outputs from inputs the sandbox never touched; inputs compared bitwise after the call"),
    Case("softmax_rows", "cheat_ext_answer_cache", "main", NO_GAIN, (), "",
         "fresh inputs per timed call: a native cache never hits, it only costs the checksum"),
    Case("softmax_rows", "cheat_ext_late_thread", "main", R, ("correctness", "integrity"),
         r"outside tolerance|changed after the call returned|thread",
         "outputs read at return and re-read after a delay; threads counted from /proc, native ones included"),
    Case("softmax_rows", "cheat_ext_burn_thread", "main", R, ("integrity",), r"thread",
         "threads the import started, counted from /proc (a C++ static initializer's included)"),
    Case("softmax_rows", "cheat_ext_include_store", "main", R, ("build",), r"results\.db.*No such file",
         "the build sandbox is jailed like every sandbox: the store's folder is out of its view, so the compiler "
         "cannot #include the database (sandbox/jail_mounts.py)", needs_view=True),
    # ---------------------------------------------------------------- honest, tricky: no false positives
    Case("relu_nonneg", "honest_clamp", "main", A, (), "", "module-level tensor constant"),
    Case("relu_nonneg", "honest_clamp", "limits", A, (), "", "still passes beside crash/hang/memory items"),
    Case("softmax_rows", "honest_fused", "main", A, (), "", "fused library op"),
    Case("softmax_rows", "honest_inplace", "main", A, (), "", "in-place ops on its own intermediates"),
    Case("softmax_rows", "honest_numpy", "main", A, (), "", "imports numpy and computes with it"),
    Case("linear_fp32", "honest_prealloc", "main", A, (), "", "buffers prepared in __init__, fresh outputs"),
    Case("softmax_rows", "honest_ext_softmax", "main", A, (), "",
         "C++ through load_inline: built once in the build sandbox, loaded read-only by every later sandbox"),
]

GPU_CHEATS = sorted((CHEATS / "gpu").rglob("cheat_*.py"))
#: probes off (these cheats are about timing; adversarial inputs at GPU sizes cost minutes); the DeviceClockGate
#: runs with the protocol's event/host ratio (1.25, see test_gpu_cheat)
GPU_PROTOCOL = {"probes.max_examples": "0", "probes.shape_examples": "0"}

SESSION_PROTOCOL = {
    # the protocol's own integrity limits, sample size and pairs: the wall-clock rule allows a share of a sample
    # plus three standard errors, which with 8 pairs on a loaded machine came within 10% of what
    # cheat_clock_between_checks hides (0.5 ms per halved sample)
    # At most 16 calls a sample (the protocol allows 64): only candidates faster than 125 us a call reach it, here
    # cheat_empty_like_timed (8 us, 64 calls: 9 s of the session building and fingerprinting 64 inputs and outputs
    # a sample) and the limits session's identity (7 us); every timed output is still fingerprinted and every
    # sample still timed by the controller (docs/results/test-suite.md#process-exits-jail-and-catalog-2026-12-02-e421431)
    # 32 pairs: at 16, a fresh-clone CI run (2026-12-02, 38ccab9) accepted cheat_clock_between_checks at 3.2x: its
    # item stopped at the 16 pairs, the wall-clock rule compared 8 unpreempted baseline samples, and the
    # bootstrap of their upper quartile allowed 1.19 ms (0.99 ms of it noise) against the 1.05 ms it hid. The
    # shipped protocol gives each pair of processes up to 2 s, not 0.6 s for the whole item
    # (engines' windows raised with it only because the protocol's cross-check asks it; no engine item here)
    "main": {"timing.min_sample_s": "0.002", "timing.min_pairs": "32", "timing.max_calls_per_sample": "16",
             "engines.windows_per_launch": "16"},
    # probes off (the identity cheat must meet the breaker), a short timeout and a small memory limit
    # the memory limit: 512 MiB, above the honest sandboxes here (peaks of 279-350 MiB resident, torch and the
    # heap protocol 7's placement writes before each round included; 281-339 MiB at protocol 7's 1e5c139; one CI
    # run of protocol 8 saw 403 MiB, over the 384 MiB this was) and a few hundred MiB of fresh memory away for the
    # OOM cheat. This VM faults fresh memory in slowly and unevenly (six
    # 256 MiB blocks alone: 0.23, 0.20, 0.27, 0.54, 1.20, 1.28 s; ~210 MB/s inside a session), and the 6 s
    # timeout came before the watchdog at 1536 MiB (two CI runs of 2026-12-02) and at 768 MiB (one); the hang
    # waits the whole timeout
    "limits": {"probes.max_examples": "0", "probes.shape_examples": "0", "sandbox.timeout_s": "6.0",
               "sandbox.memory_mb": "512", "timing.max_calls_per_sample": "16"},
    "store": {"probes.max_examples": "0", "probes.shape_examples": "0", "sandbox.isolation": '"off"'},
    "raw": {"probes.max_examples": "0", "probes.shape_examples": "0", "sandbox.isolation": '"off"'},
}


@dataclass
class SessionRun:
    name: str
    root: Path
    items: dict  # (problem, candidate) -> report item
    stdout: str
    stderr: str
    ret: int
    seconds: float
    report: dict  # the whole JSON report ({} when the session wrote none)


def _disable_conftest() -> str:
    """A conftest for the session's controller that switches off the named gates (AUTOTUNE_CATALOG_DISABLE)."""
    names = [n.strip() for n in os.environ.get("AUTOTUNE_CATALOG_DISABLE", "").split(",") if n.strip()]
    if not names:
        return ""
    modules = ("pytest_autotune.gates.integrity", "pytest_autotune.gates.clocks", "pytest_autotune.gates.timed_outputs",
               "pytest_autotune.gates.probes", "pytest_autotune.gates.correctness", "pytest_autotune.gates.breaker")
    lines = ["import importlib", f"_MODULES = [importlib.import_module(m) for m in {modules!r}]"]
    for n in names:
        lines += ["for _m in _MODULES:",
                  f"    if hasattr(_m, {n!r}):",
                  f"        getattr(_m, {n!r}).check = lambda self, ctx, stage: None"]
    return "\n".join(lines) + "\n"


def _run_session(pytester: pytest.Pytester, name: str, only: Optional[list[Case]] = None,
                 overrides: Optional[dict] = None) -> SessionRun:
    cases = only if only is not None else [c for c in CATALOG if c.session == name]
    root = pytester.path
    shutil.copytree(CHEATS / "problems", root / "problems")
    for c in cases:
        dest = root / "candidates" / c.problem / f"{c.name}.py"
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(c.path, dest)
    (root / "protocol.toml").write_text(fast_protocol_text(**{**SESSION_PROTOCOL[name], **(overrides or {})}))
    conftest = _disable_conftest()
    if conftest:
        (root / "conftest.py").write_text(conftest)
    report = root / "report.json"
    (root / "tmp").mkdir()
    t0 = time.monotonic()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TMPDIR", str(root / "tmp"))  # the sandbox logs land here
        res = pytester.runpytest_subprocess(
            "--autotune", "--autotune-exploratory", "--problems", "problems", "--candidates", "candidates",
            "--autotune-json", str(report), "-p", "no:cacheprovider", "-q", timeout=600)
    seconds = time.monotonic() - t0
    items = {}
    data = json.loads(report.read_text()) if report.exists() else {}
    for it in data.get("items", []):
        items[(it["problem"], it["candidate"])] = it
    return SessionRun(name, root, items, res.stdout.str(), res.stderr.str(), res.ret, seconds, data)


@pytest.fixture(scope="module")
def sessions(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest):
    """Run each session lazily, once per module: one Pytester (its own folder) per session."""
    runs: dict[str, SessionRun] = {}
    mp = pytest.MonkeyPatch()

    def get(name: str) -> SessionRun:
        if name not in runs:
            pytester = pytest.Pytester(ModuleRequest(request), tmp_path_factory, mp,  # type: ignore[arg-type]
                                       _ispytest=True)
            runs[name] = _run_session(pytester, name)
        return runs[name]

    try:
        yield get
    finally:
        mp.undo()
        for run in runs.values():
            print(f"cheat catalog session {run.name}: {run.seconds:.0f} s, {len(run.items)} items")


@pytest.fixture
def remeasure(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest):
    """A session of its own for a "gains nothing" cheat and the honest reference, each over two pairs of processes:
    the catalog's sessions give an item one pair of processes in 0.6 s, and one pair carries an offset of its own
    (docs/design/protocol.md#pairs-of-processes): a fresh-clone CI run read cheat_instance_patch, which computes what
    honest_fused computes, at 4.32x [4.12, 4.43] against 3.30-3.40, where twelve sessions of the two alone agreed
    within 6%. A real gain repeats in a second session; an offset of one pair of processes does not."""
    mp = pytest.MonkeyPatch()

    def run(case: Case) -> SessionRun:
        pytester = pytest.Pytester(request, tmp_path_factory, mp, _ispytest=True)  # type: ignore[arg-type]
        honest = next(c for c in CATALOG if (c.problem, c.name) == REFERENCE_HONEST)
        return _run_session(pytester, case.session, only=[honest, case],
                            overrides={"timing.process_pairs": "2", "timing.item_budget_s": "1.2"})

    try:
        yield run
    finally:
        mp.undo()


def _gain(it: dict, honest: dict) -> Optional[str]:
    """Whether an accepted "gains nothing" cheat gained: its CI entirely above the honest candidate's (x the
    margin; two items of one noisy session, measured minutes apart, differ by more than their point estimates
    say). None, or what it read."""
    limit = honest["ci"][1] * GAIN_MARGIN
    if it["ci"][0] <= limit:
        return None
    return (f"{it['speedup']:.2f}x (CI {it['ci']}), the honest {REFERENCE_HONEST[1]} has CI {honest['ci']} "
            f"(limit {limit:.2f}x)")


def _item(run: SessionRun, case: Case) -> dict:
    it = run.items.get((case.problem, case.name))
    assert it is not None, (
        f"{case.problem}/{case.name} has no item in the {run.name} session's report "
        f"(exit {run.ret}).\nstdout tail:\n{run.stdout[-3000:]}\nstderr tail:\n{run.stderr[-3000:]}")
    return it


def _describe(it: dict) -> str:
    return (f"verdict={it['verdict']} gate={it['gate']} speedup={it.get('speedup')} ci={it.get('ci')}\n"
            f"reason: {it['reason']}\nwall clock: {(it.get('details') or {}).get('wall_clock')}\n"
            f"findings: {it.get('findings')}\nkernelbench: {it.get('kernelbench')}")


def _counts_every_process(run: "SessionRun") -> bool:
    iso = (run.report.get("run") or {}).get("isolation") or {}
    return "pid" in (iso.get("namespaces") or ()) or str(iso.get("limits", "")).startswith("cgroup")


@pytest.mark.parametrize("case", [c for c in CATALOG if c.session != "store"], ids=lambda c: c.id)
def test_catalog(sessions, remeasure, case: Case) -> None:
    run = sessions(case.session)
    if case.needs_jail_count and not _counts_every_process(run):
        pytest.skip(f"{case.name}: its defence is the jail's pid namespace or cgroup, which this machine does not "
                    "give (docs/design/threat-model.md, 'Honest limits')")
    if case.needs_view and not ((run.report.get("run") or {}).get("isolation") or {}).get("view"):
        pytest.skip(f"{case.name}: its defence is the jail's read-only view without the store, which this machine "
                    "does not give (docs/design/threat-model.md, 'Honest limits')")
    it = _item(run, case)
    if case.verdicts == NO_GAIN:
        if it["verdict"] == "accepted":
            honest = run.items.get(REFERENCE_HONEST)
            assert honest is not None and honest["verdict"] == "accepted", "the honest reference must be accepted"
            first = _gain(it, honest)
            if first is None:
                return
            again = remeasure(case)  # a gain must repeat in a session of its own, over two pairs of processes
            it2, honest2 = _item(again, case), again.items.get(REFERENCE_HONEST)
            assert honest2 is not None and honest2["verdict"] == "accepted", "the honest reference must be accepted"
            if it2["verdict"] != "accepted":
                assert it2["verdict"] == "rejected" and it2["gate"] in ("correctness", "probe", "integrity"), \
                    _describe(it2)
                return
            second = _gain(it2, honest2)
            assert second is None, (f"{case.name} gained in two sessions: {first}; then {second}\n{_describe(it)}\n"
                                    f"{_describe(it2)}")
        else:
            assert it["verdict"] == "rejected" and it["gate"] in ("correctness", "probe", "integrity"), _describe(it)
        return
    wall = (it.get("details") or {}).get("wall_clock") or {}
    if (case.name == "cheat_clock_between_checks" and it["verdict"] == "accepted"
            and "machine is loaded" in str(wall.get("compared"))):
        # the rule's own limit, said on the item: under load it compares samples that waited milliseconds for a
        # CPU, and preemption can only hide time there (an honest candidate is never refused for it)
        pytest.skip(f"the machine was too loaded for the wall-clock rule to resolve the cheat's cut: {wall}")
    if case.name == "cheat_clock_between_checks" and it["verdict"] == "accepted":
        # the wall-clock rule is a statistical test of the controller's windows: at this session's budget (0.6 s an
        # item, 32 pairs) its noise term can reach the ~0.4-1 ms the cheat hides without the machine reading as
        # loaded (a fresh-clone run at f0a6034: 0.37 ms hidden against 0.51 ms allowed, 0.35 ms of it noise). The
        # cheat must then be refused in a session of its own (docs/design/threat-model.md, "Honest limits")
        it = _item(remeasure(case), case)
    assert it["verdict"] in case.verdicts, f"{case.defence}\n{_describe(it)}"
    if case.gates:
        assert it["gate"] in case.gates, f"{case.defence}\n{_describe(it)}"
    if case.reason:
        assert re.search(case.reason, it["reason"]), f"{case.defence}\n{_describe(it)}"
    if case.finding:
        assert any(re.search(case.finding, f["clause"]) for f in it["findings"]), f"{case.defence}\n{_describe(it)}"
    if case.kernelbench:
        assert (it.get("kernelbench") or {}).get("verdict") == case.kernelbench, f"{case.defence}\n{_describe(it)}"


def test_limits_session_survives(sessions) -> None:
    """Crash, hang and memory blow-up end as pytest *errors* of their own items; the session goes on and the
    honest item beside them passes."""
    run = sessions("limits")
    assert re.search(r"\b3 errors?\b", run.stdout), run.stdout[-3000:]
    assert re.search(r"\b1 passed\b", run.stdout), run.stdout[-3000:]


@pytest.mark.parametrize("cheat,prefix", [("cheat_burn_process", "atb"), ("cheat_burn_setsid", "ats")])
def test_helper_process_dies_with_the_sandbox(sessions, cheat: str, prefix: str) -> None:
    """cheat_burn_process forks CPU-burning helpers, cheat_burn_setsid the same in sessions of their own; they must
    not outlive their sandbox (process group kill; for setsid helpers, the jail's pid namespace). The helpers name
    themselves after the cheat's path (the jailed sandbox cannot write a pid file), so they are found by name."""
    run = sessions("main")
    path = run.root / "candidates" / "softmax_rows" / f"{cheat}.py"
    name = prefix + hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]
    iso = (run.report.get("run") or {}).get("isolation") or {}
    if prefix == "ats" and "pid" not in (iso.get("namespaces") or ()):
        for p in _named(name):
            os.kill(p, signal.SIGKILL)
        pytest.skip("setsid helpers outlive a sandbox without the jail's pid namespace (docs/design/threat-model.md)")
    assert f"{name} started" in _sandbox_logs(run), "the cheat never started its helpers (did it run?)"
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and _named(name):
        time.sleep(0.1)
    alive = _named(name)
    for p in alive:  # ours to clean up: the cheat's helpers, started by this test's session
        os.kill(p, signal.SIGKILL)
    assert not alive, f"helper processes {alive} outlived their sandbox"


def _named(comm: str) -> list[int]:
    out = []
    for e in os.listdir("/proc"):
        if not e.isdigit():
            continue
        try:
            with open(f"/proc/{e}/comm") as f:
                if f.read().strip() == comm[:15] and _alive(int(e)):
                    out.append(int(e))
        except OSError:
            continue
    return out


def _sandbox_logs(run: SessionRun) -> str:
    return "\n".join(p.read_text(errors="replace") for p in sorted((run.root / "tmp").glob("autotune-sandbox-*/*.log")))


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][:1] != "Z"
    except (OSError, IndexError):
        return False


def _db(run: SessionRun) -> Path:
    return run.root / ".autotune" / "results.db"


def _verify(db: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest_autotune.cli", "verify", "--db", str(db)],
                          check=False, capture_output=True, text=True, timeout=120, cwd=str(REPO))


def test_raw_insert_is_refused_and_the_store_verifies(sessions) -> None:
    """cheat_db_insert found the results database and tried a raw INSERT: the validator refused it, nothing of
    it is in the database, and ``autotune verify`` passes."""
    run = sessions("raw")
    attempt = run.root / "candidates" / "softmax_rows" / "cheat_db_insert.attempt.txt"
    assert attempt.exists(), "the cheat never ran"
    lines = attempt.read_text().splitlines()  # one attempt per sandbox that imported it
    assert lines and all(line.startswith("refused: IntegrityError") for line in lines), lines
    with sqlite3.connect(str(_db(run))) as conn:
        rows = conn.execute("SELECT candidate, speedup FROM results").fetchall()
    assert rows, "the accepted items should have been recorded"
    assert not [r for r in rows if r[1] >= 10.0], rows
    assert [r for r in rows if r[0] == "cheat_db_insert"] == [] or all(r[1] < 10 for r in rows)
    v = _verify(_db(run))
    assert v.returncode == 0, v.stdout + v.stderr


def test_forged_row_is_reported(sessions) -> None:
    """cheat_db_forge inserted a row the in-database validator cannot tell from a real one; its row MAC (keyed by
    the run's secret nonce, which never enters the sandbox) betrays it: the run's finish reports it and
    ``autotune verify`` fails naming it. The database is tamper-evident, not tamper-proof."""
    run = sessions("store")
    attempt = run.root / "candidates" / "softmax_rows" / "cheat_db_forge.attempt.txt"
    assert attempt.exists(), "the cheat never ran"
    # its first sandbox inserts the forged row; a later one meets its own row (UNIQUE run_id, nodeid)
    assert attempt.read_text().startswith("inserted"), attempt.read_text()
    assert "row_mac" in run.stdout + run.stderr, (run.stdout + run.stderr)[-3000:]
    v = _verify(_db(run))
    assert v.returncode == 1, v.stdout + v.stderr
    assert re.search(r"results row \d+.*(mac|MAC)", v.stdout), v.stdout


def _declared(path: Path, name: str, default=None):
    """A literal a GPU cheat file declares at top level (``EXPECT``, ``SURVIVOR``, ``BLOCKED``)."""
    m = re.search(rf"^{name} = .*$", path.read_text(), re.MULTILINE)
    if not m:
        return default
    ns: dict = {}
    exec(m.group(0), ns)  # noqa: S102 - a literal from our own file
    return ns[name]


@pytest.fixture(scope="module")
def gpu_session(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest):
    """Every GPU cheat and each problem's honest companion in ONE --device=cuda session (a session per file cost
    a minute each on the H200); the honest items run after the cheats of their problem, so a cheat that left
    something behind (a helper holding the GPU's memory) shows as an honest item that fails."""
    mp = pytest.MonkeyPatch()
    pytester = pytest.Pytester(ModuleRequest(request), tmp_path_factory, mp, _ispytest=True)  # type: ignore[arg-type]
    root = pytester.path
    shutil.copytree(CHEATS / "problems", root / "problems")
    for path in GPU_CHEATS + sorted((CHEATS / "gpu").glob("*/honest.py")):
        dest = root / "candidates" / path.parent.name / path.name
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, dest)
    # probes off: these cheats are about timing, and adversarial inputs at GPU sizes cost minutes
    # ``GPU_PROTOCOL`` tightens the event/host cross-check: with the frozen 3.0, host time may exceed event time
    # by twice the candidate's event time, which let the side-stream cheat through at 6.8x (honest: 2.6x)
    (root / "protocol.toml").write_text(fast_protocol_text(**GPU_PROTOCOL))
    (root / "tmp").mkdir()
    report = root / "report.json"
    mp.setenv("TMPDIR", str(root / "tmp"))  # the sandbox logs land here
    t0 = time.monotonic()
    res = pytester.runpytest_subprocess("--autotune", "--autotune-exploratory", "--device=cuda", "--problems",
                                        "problems", "--candidates", "candidates", "--autotune-json", str(report),
                                        "-p", "no:cacheprovider", "-q", timeout=900)
    seconds = time.monotonic() - t0
    data = json.loads(report.read_text()) if report.exists() else {}
    items = {(it["problem"], it["candidate"]): it for it in data.get("items", [])}
    for (problem, name), item in sorted(items.items()):
        print(problem, name, item["verdict"], item.get("gate"), item.get("speedup"), item.get("reason", "")[:300])
    run = SessionRun("gpu", root, items, res.stdout.str(), res.stderr.str(), res.ret, seconds, data)
    try:
        yield run
    finally:
        mp.undo()
        print(f"cheat catalog session gpu: {seconds:.0f} s, {len(items)} items")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="GPU-only cheats need a CUDA device")
@pytest.mark.parametrize("path", GPU_CHEATS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_gpu_cheat(gpu_session: SessionRun, path: Path) -> None:
    """GPU-only cheats (side-stream work after return, persisting-L2 carve-out, helper processes and a second
    context on the GPU, a fork bomb and a memory hog under the jail); each file names the gate and reason it
    expects in ``EXPECT = (verdicts, gate, regex)``, optionally ``SURVIVOR`` (a process name that must not outlive
    the session) and ``BLOCKED`` (a regex over its ``JAIL-CHEAT`` line: why its attack failed)."""
    verdicts, gate, reason = _declared(path, "EXPECT")
    problem = path.parent.name
    it = gpu_session.items.get((problem, path.stem))
    assert it is not None, f"no item for {path.stem} (exit {gpu_session.ret})\n{gpu_session.stdout[-3000:]}"
    honest = gpu_session.items.get((problem, "honest"))
    if honest is not None:  # it ran after the cheats of its problem: nothing they did may have cost it
        assert honest["verdict"] == "accepted", _describe(honest)
    survivor = _declared(path, "SURVIVOR")
    if survivor:
        alive = _named(survivor)
        for p in alive:  # ours to clean up: started by this test's session
            os.kill(p, signal.SIGKILL)
        assert not alive, f"{path.stem}'s helper {survivor} outlived its sandbox: {alive}"
    blocked = _declared(path, "BLOCKED")
    if blocked:
        tag = path.stem.removeprefix("cheat_")
        lines = re.findall(rf"^JAIL-CHEAT {tag}: (.*)$", _sandbox_logs(gpu_session), re.MULTILINE)
        assert lines and all(re.search(blocked, ln) for ln in lines), lines
    if verdicts == NO_GAIN:
        if it["verdict"] == "accepted":
            assert honest is not None
            limit = honest["ci"][1] * GAIN_MARGIN
            assert it["speedup"] <= limit, f"gained: limit {limit:.2f}x\n{_describe(it)}"
        else:
            assert it["verdict"] in ("rejected", "quarantined"), _describe(it)
        return
    assert it["verdict"] in verdicts and (gate is None or it["gate"] == gate), _describe(it)
    assert re.search(reason, it["reason"] or ""), _describe(it)
