"""KernelBench-format agent solutions, read from the two layouts they are published in (docs/reference/cli.md,
``autotune import kernelbench``): what each solution is, the problem it answers, and the numbers published for it.

* **the leaderboard** (KernelBench's public leaderboard site): ``docs/assets/problems/l<level>_p<id>.py``,
  ``docs/assets/solutions/<hash>.py``, ``docs/assets/data.json`` (``"Level 1: 19_ReLU"`` -> its solutions: model,
  speedup, file) and ``docs/assets/raw_data.json`` (every solution: problem id, level, model, speedup over torch
  eager and over torch.compile, both baselines' times, the kernel's time); the GPU is named on ``docs/index.html``.
* **a KernelBench run** (its ``runs/<run name>/``): ``level_<L>_problem_<P>_sample_<S>_kernel.py`` per sample,
  ``eval_results.json`` (``"<P>"`` -> one record per sample: compiled, correctness, runtime in ms, metadata with the
  GPU's name) and ``generation_config.yaml`` (the model); the problem files are KernelBench's own
  (``KernelBench/level<L>/<P>_<Name>.py``, ``--kernelbench``) and the speedup is a baseline's time
  (``results/timing/<GPU>/baseline_time_torch.json``, ``--baseline-times``) over the sample's runtime.

Nothing here imports or runs a solution: files are read as bytes and copied unchanged.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from ..errors import AutotuneError

LEADERBOARD_SOURCE = "KernelBench leaderboard"
RUN_SOURCE = "KernelBench run"
_KERNEL = re.compile(r"^level_(\d+)_problem_(\d+)_sample_(\d+)_kernel\.py$")


class LayoutError(AutotuneError):
    """A source folder that is neither layout, or lacks a file the layout needs (the message names it)."""


@dataclass
class Solution:
    """One agent solution, as found: its bytes are copied unchanged."""

    problem: str  # the problem's stem, KernelBench's file name ("19_ReLU")
    problem_path: Path
    path: Path
    model: str  # as the source names it ("claude-3.5-sonnet")
    source_id: str  # the leaderboard's file hash, or "<run>/p<P>_s<S>"
    prefix: str  # "lb" (leaderboard) or "kb" (a KernelBench run)
    published: dict = field(default_factory=dict)  # speedup(s), hardware, source and what else was published

    def name(self, long: bool = False) -> str:
        """The candidate's name: where it comes from, the model, the source's id -- ``lb_claude35sonnet_fa3e10d5``
        (the leaderboard's file hash, its first 8 characters unless ``long``), ``kb_<model>_<run>_s<sample>``."""
        if self.prefix == "lb":
            return f"lb_{slug(self.model)}_{slug(self.source_id) if long else slug(self.source_id)[:8]}"
        run, _, rest = self.source_id.rpartition("/")
        return f"kb_{slug(self.model)}_{slug(run) if long else slug(run)[:12]}_s{rest.rpartition('_s')[2]}"


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower()) or "x"


def detect(src: Path) -> str:
    """``leaderboard`` or ``run``, from the files the folder holds."""
    if (src / "docs" / "assets" / "raw_data.json").is_file() or (src / "docs" / "assets" / "data.json").is_file():
        return "leaderboard"
    if (src / "eval_results.json").is_file() or any(_KERNEL.match(p.name) for p in src.glob("level_*_kernel.py")):
        return "run"
    raise LayoutError(f"{src} is neither KernelBench leaderboard (docs/assets/data.json) nor a KernelBench run "
                       "(level_<L>_problem_<P>_sample_<S>_kernel.py, eval_results.json): pass the repository's root "
                       "or runs/<run name>/")


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise LayoutError(f"cannot read {path}: {e}") from None


# ---------------------------------------------------------------------------------------------- the leaderboard
def leaderboard_hardware(src: Path) -> Optional[str]:
    """The GPU the leaderboard's page names ("Nvidia L40S GPU" -> "L40S")."""
    try:
        page = (src / "docs" / "index.html").read_text(errors="replace")
    except OSError:
        return None
    m = re.search(r"nvidia\s+([A-Za-z0-9][A-Za-z0-9 -]*?)\s+gpu", page, re.I)
    return m.group(1).strip() if m else None


def read_leaderboard(src: Path, level: int, hardware: Optional[str] = None) -> list[Solution]:
    assets = src / "docs" / "assets"
    hw = hardware or leaderboard_hardware(src) or "unknown"
    names: dict[int, str] = {}  # problem id -> KernelBench's name, from data.json's keys
    listed: dict[str, dict] = {}  # solution file -> its data.json entry
    data = _json(assets / "data.json") if (assets / "data.json").is_file() else {}
    for key, entries in dict(data).items():
        m = re.match(r"^Level (\d+): ((\d+)_.*)$", str(key))
        if not m or int(m.group(1)) != level:
            continue
        names[int(m.group(3))] = m.group(2)
        for e in entries or []:
            if isinstance(e, dict) and e.get("file"):
                listed[str(e["file"])] = {**e, "problem_id": int(m.group(3))}
    raw = _json(assets / "raw_data.json") if (assets / "raw_data.json").is_file() else []
    records: dict[str, dict] = {}
    for r in raw:
        if isinstance(r, dict) and r.get("file") and int(r.get("level") or 0) == level:
            # raw_data.json counts problems from 0 (its problem_id 18 is data.json's "Level 1: 19_ReLU", and the
            # solution's own code answers 19_ReLU: every one of the 383 solutions both list agrees), KernelBench's
            # file names and the problems/l<L>_p<id>.py files from 1; data.json's own id wins where it lists the file
            f = str(r["file"])
            records[f] = {**r, "problem_id": listed[f]["problem_id"] if f in listed
                          else int(r.get("problem_id") or 0) + 1}
    for f, e in listed.items():
        records.setdefault(f, {"problem_id": e["problem_id"], "display_name": e.get("display_name"),
                               "torch_speedup": e.get("torch_speedup"), "file": f})
    out = []
    for f, r in sorted(records.items()):
        pid = int(r.get("problem_id") or 0)
        path, problem_path = assets / "solutions" / f"{f}.py", assets / "problems" / f"l{level}_p{pid}.py"
        if not path.is_file() or not problem_path.is_file():
            continue  # a listed solution or problem whose file is not there: nothing to measure
        model = str(r.get("display_name") or r.get("model") or "unknown")
        published = {"speedup": _num(r.get("torch_speedup")), "speedup_vs_torch_compile":
                     _num(r.get("torch_compile_speedup")), "hardware": hw, "source": LEADERBOARD_SOURCE,
                     "baseline_ms": _num(r.get("baseline_torch_time")),
                     "baseline_compile_ms": _num(r.get("baseline_torch_compile_time")),
                     "kernel_ms": _num(r.get("kernel_eval_time")), "model_id": r.get("model"),
                     "correct": True}  # the leaderboard lists solutions its check accepted
        out.append(Solution(names.get(pid, f"{pid}_l{level}_p{pid}"), problem_path, path, model, f, "lb",
                            {k: v for k, v in published.items() if v is not None}))
    return out


def _num(v: Any) -> Optional[float]:
    try:
        return None if v is None or isinstance(v, bool) else float(v)
    except (TypeError, ValueError):
        return None


# ---------------------------------------------------------------------------------------------- a KernelBench run
def run_model(src: Path) -> str:
    """``model_name`` from the run's generation_config.yaml (a flat ``key: value`` file), else the folder's name."""
    try:
        for line in (src / "generation_config.yaml").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model_name" and value.strip() not in ("", "null", "None", "~"):
                return value.strip().strip("'\"")
    except OSError:
        pass
    return src.name


def kernelbench_problems(kb: Path, level: int) -> dict[int, Path]:
    """Problem id -> its file, from a KernelBench checkout (or its ``KernelBench/`` or ``level<L>/`` folder)."""
    for folder in (kb / "KernelBench" / f"level{level}", kb / f"level{level}", kb):
        files = {int(m.group(1)): p for p in folder.glob("*.py") if (m := re.match(r"^(\d+)_", p.name))}
        if files:
            return files
    raise LayoutError(f"no KernelBench level {level} problem files under {kb} (expected "
                       f"KernelBench/level{level}/<id>_<Name>.py): pass --kernelbench=<KernelBench checkout>")


def read_run(src: Path, level: int, kb: Optional[Path], baseline_times: Optional[Path],
             hardware: Optional[str] = None) -> list[Solution]:
    if kb is None:
        raise LayoutError(f"{src} is a KernelBench run: its problems are KernelBench's own files; pass "
                           "--kernelbench=<KernelBench checkout>")
    problems = kernelbench_problems(kb, level)
    evals = _json(src / "eval_results.json") if (src / "eval_results.json").is_file() else {}
    base = dict(_json(baseline_times).get(f"level{level}") or {}) if baseline_times else {}
    base_hw = next((str(v.get("hardware")) for v in base.values() if isinstance(v, dict) and v.get("hardware")), None)
    model = run_model(src)
    out = []
    for path in sorted(src.glob("level_*_kernel.py")):
        m = _KERNEL.match(path.name)
        if not m or int(m.group(1)) != level or int(m.group(2)) not in problems:
            continue
        pid, sample = int(m.group(2)), int(m.group(3))
        problem_path = problems[pid]
        ev = next((e for e in evals.get(str(pid)) or [] if isinstance(e, dict) and e.get("sample_id") == sample), {})
        meta: dict = ev["metadata"] if isinstance(ev.get("metadata"), dict) else {}
        runtime = _num(ev.get("runtime"))
        b = base.get(problem_path.name) or {}
        mean = _num(b.get("mean")) if isinstance(b, dict) else None
        speedup = mean / runtime if mean and runtime and runtime > 0 and ev.get("correctness") else None
        published = {"speedup": speedup, "hardware": hardware or meta.get("hardware") or base_hw or "unknown",
                     "source": RUN_SOURCE, "kernel_ms": runtime if runtime and runtime > 0 else None,
                     "baseline_ms": mean, "correct": bool(ev.get("correctness")) if ev else None,
                     "compiled": ev.get("compiled") if ev else None,
                     "baseline_hardware": b.get("hardware") if isinstance(b, dict) else None, "run": src.name, "sample": sample}
        out.append(Solution(problem_path.stem, problem_path, path, model, f"{src.name}/p{pid}_s{sample}", "kb",
                            {k: v for k, v in published.items() if v is not None}))
    return out
