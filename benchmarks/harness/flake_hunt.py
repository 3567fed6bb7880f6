"""The flake hunt: run the project's tests N times, some runs beside a CPU hog of known load, and report every test
that failed at least once with its failure text (docs/results/flake-hunt.md).

    python benchmarks/harness/flake_hunt.py --runs 5 --hog-runs 2 --out /tmp/hunt            # the whole suite
    python benchmarks/harness/flake_hunt.py --runs 3 --hog-runs 3 --hog 1 --hog-duty 0.9 --hog-cpus 1 \\
        --out /tmp/hunt -m quiet_timing tests                                             # a marked part
    python benchmarks/harness/flake_hunt.py --report-only /tmp/hunt                       # the report again

Each run is ``python -m pytest <paths> [-m EXPR] [args after --]`` from the repository's root (the README's test
command, with a junitxml written), in a process group of its own. A hogged run starts ``--hog`` busy processes at
``--hog-duty`` of every 0.1 s (``benchmarks/harness/flake_hog.py``), on ``--hog-cpus`` or unpinned, before pytest
and stops them after it, also on Ctrl-C, SIGTERM or an error. Which runs are hogged: spread over the series, the
first run unhogged (``--hog-runs K`` of ``--runs N``; the plan is printed first).

The load of every run is measured, not only the one asked for: the hog's own CPU seconds (its duty achieved), the
whole machine's busy share from ``/proc/stat``, the CPU seconds of pytest and the children it waited for, and an
estimate of everyone else's (machine busy CPU less both), with the load averages at the start and the end.

OUT gets ``run-NN/junit.xml``, ``run-NN/pytest.log`` and ``run-NN/run.json`` per run, and ``report.json`` and
``report.md`` (benchmarks/harness/flake_report.py), written again after every run, so a hunt can be read while it
runs and a stopped one keeps what it measured. Failure texts name the checkout as ``<repository>``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import resource
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))

from flake_hog import Hog  # noqa: E402
from flake_report import aggregate, markdown, read_junit  # noqa: E402

#: seconds pytest gets to end after the hunt is interrupted before its process group is killed
INTERRUPT_GRACE_S = 30.0


def hog_plan(runs: int, hog_runs: int) -> list[bool]:
    """Which of ``runs`` runs are hogged: ``hog_runs`` of them, spread out, the first unhogged where any is not."""
    if not 0 <= hog_runs <= runs:
        raise ValueError(f"--hog-runs={hog_runs}: give 0 to --runs ({runs})")
    quiet = runs - hog_runs
    plan, q, h = [], 0, 0
    for i in range(runs):
        # the hogged share so far stays at or below the target share, the first run quiet when any is
        if h < hog_runs and (q == quiet or (h + 1) * runs <= hog_runs * (i + 1) and i > 0):
            plan.append(True)
            h += 1
        else:
            plan.append(False)
            q += 1
    return plan


def cpu_times() -> tuple[float, float]:
    """(busy, total) jiffies of the whole machine from /proc/stat's ``cpu`` line (idle and iowait are not busy)."""
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    total = sum(values[:8])  # guest time is already inside user
    return total - values[3] - values[4], total


def git(*args: str) -> str:
    res = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True)
    return res.stdout.strip() if res.returncode == 0 else "unknown"


def pytest_command(paths: list[str], marker: Optional[str], extra: list[str], junit: Path) -> list[str]:
    cmd = [sys.executable, "-m", "pytest", *paths]
    if marker:
        cmd += ["-m", marker]
    return cmd + [*extra, f"--junitxml={junit}", "-o", "junit_family=xunit1"]


def run_pytest(cmd: list[str], log: Path, timeout_s: Optional[float]) -> int:
    """pytest in a process group of its own, its output into ``log``; on an interrupt (or past ``timeout_s``) the
    group gets SIGINT, then SIGKILL after ``INTERRUPT_GRACE_S``."""
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            return proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            out.write(f"\n[flake hunt] no end within {timeout_s} s: interrupted\n")
            _stop_group(proc)
            return proc.returncode if proc.returncode is not None else -signal.SIGKILL
        except BaseException:
            _stop_group(proc)
            raise


def _stop_group(proc: subprocess.Popen) -> None:
    for sig, wait in ((signal.SIGINT, INTERRUPT_GRACE_S), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def one_run(n: int, hogged: bool, args: argparse.Namespace, out: Path) -> dict:
    folder = out / f"run-{n:02d}"
    folder.mkdir(parents=True, exist_ok=True)
    junit = folder / "junit.xml"
    cmd = pytest_command(args.paths, args.marker, args.pytest_args, junit)
    record: dict = {"run": n, "started": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M"),
                    "command": shlex.join(["python", *cmd[1:]]).replace(str(REPO) + "/", ""),
                    "junit": str(junit.relative_to(out)), "log": str((folder / "pytest.log").relative_to(out))}
    hog = Hog(args.hog, args.hog_duty, args.hog_cpus) if hogged and args.hog else None
    load: dict = {"loadavg_start": list(os.getloadavg())}
    busy0, total0 = cpu_times()
    children0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    try:
        if hog is not None:
            hog.start()
        rc = run_pytest(cmd, folder / "pytest.log", args.run_timeout)
    finally:
        if hog is not None:
            hog.stop()
    wall = time.perf_counter() - t0
    busy1, total1 = cpu_times()
    children1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    tick = os.sysconf("SC_CLK_TCK")
    machine_cpu = (busy1 - busy0) / tick
    pytest_cpu = (children1.ru_utime + children1.ru_stime) - (children0.ru_utime + children0.ru_stime)
    hog_cpu = 0.0
    if hog is not None:
        load["hog"] = {**hog.describe(), "achieved": hog.achieved()}
        hog_cpu = load["hog"]["achieved"]["cpu_s"]
        pytest_cpu -= hog_cpu  # the hog's processes are this process's waited-for children too
    load.update({"machine_busy": round((busy1 - busy0) / max(1, total1 - total0), 3),
                 "machine_cpu_s": round(machine_cpu, 1), "pytest_cpu_s": round(pytest_cpu, 1),
                 "others_cpu_s": round(max(0.0, machine_cpu - pytest_cpu - hog_cpu), 1),
                 "loadavg_end": list(os.getloadavg())})
    record.update({"load": load, "wall_s": round(wall, 1), "rc": rc})
    (folder / "run.json").write_text(json.dumps(record, indent=1) + "\n")
    return record


def write_report(out: Path, head: dict) -> dict:
    """report.json and report.md from every ``run-NN/run.json`` in ``out`` and their junitxml."""
    runs = [json.loads(p.read_text()) for p in sorted(out.glob("run-*/run.json"))]
    redact = {str(REPO): "<repository>"}
    outcomes = {r["run"]: (read_junit(out / r["junit"], redact) if (out / r["junit"]).is_file() else None)
                for r in runs}
    report = aggregate(runs, outcomes)
    report["head"] = head
    (out / "report.json").write_text(json.dumps(report, indent=1) + "\n")
    (out / "report.md").write_text(markdown(report, head))
    return report


def machine() -> str:
    model = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
                 platform.processor())
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{os.cpu_count()} CPUs ({model}), {mem:.0f} GiB, Python {platform.python_version()}"


def parse(argv: list[str]) -> argparse.Namespace:
    pytest_args: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, pytest_args = argv[:i], argv[i + 1:]
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("paths", nargs="*", default=["tests"], help="test paths for pytest (default: tests)")
    p.add_argument("-m", dest="marker", help="pytest's marker expression, e.g. quiet_timing")
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--hog-runs", type=int, default=0, help="how many of the runs are hogged (spread out)")
    p.add_argument("--hog", type=int, default=1, help="busy processes in a hogged run (default 1)")
    p.add_argument("--hog-duty", type=float, default=1.0, help="busy share of every 0.1 s, (0, 1] (default 1.0)")
    p.add_argument("--hog-cpus", type=lambda s: [int(c) for c in s.split(",")], default=None,
                   help="pin the hog to these CPUs, e.g. 1 or 0,1 (default: unpinned)")
    p.add_argument("--run-timeout", type=float, default=None, help="seconds before a run is interrupted")
    p.add_argument("--out", type=Path, help="the hunt's folder (default: .autotune/flake-hunt-<UTC time>)")
    p.add_argument("--report-only", type=Path, metavar="OUT", help="write OUT's report again, run nothing")
    args = p.parse_args(argv)
    args.pytest_args = pytest_args
    return args


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: Optional[list[str]] = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    if args.report_only:
        head = json.loads((args.report_only / "report.json").read_text()).get("head", {})
        report = write_report(args.report_only, head)
        print((args.report_only / "report.md").resolve())
        return 0 if report["summary"]["tests_failed_at_least_once"] == 0 else 1
    plan = hog_plan(args.runs, args.hog_runs)
    Hog(args.hog, args.hog_duty, args.hog_cpus)  # a usage error before anything runs
    stamp = dt.datetime.now(dt.timezone.utc)
    out = (args.out or REPO / ".autotune" / f"flake-hunt-{stamp:%Y%m%d-%H%M%S}").resolve()
    out.mkdir(parents=True, exist_ok=True)
    rerun = shlex.join(["python", "benchmarks/harness/flake_hunt.py", *(sys.argv[1:] if argv is None else argv)])
    dirty = " (with uncommitted changes)" if git("status", "--porcelain", "--untracked-files=no") else ""
    head = {"date": f"{stamp:%Y-%m-%d}", "commit": git("rev-parse", "--short", "HEAD") + dirty,
            "command": shlex.join(["python", "-m", "pytest", *args.paths, *(["-m", args.marker] if args.marker
                                                                              else []), *args.pytest_args]),
            "machine": machine(), "rerun": rerun, "plan": ["hog" if h else "quiet" for h in plan]}
    print(f"flake hunt into {out}: {args.runs} run(s): {', '.join(head['plan'])}", flush=True)
    signal.signal(signal.SIGTERM, _raise_interrupt)
    first = 1 + len(list(out.glob("run-*/run.json")))
    for i, hogged in enumerate(plan):
        record = one_run(first + i, hogged, args, out)
        report = write_report(out, head)
        c = report["runs"][-1]["counts"] or {}
        print(f"run {record['run']} ({'hog' if hogged else 'quiet'}): exit {record['rc']} in {record['wall_s']:.0f} s, "
              f"{c.get('passed', '-')} passed, {c.get('failed', '-')} failed, {c.get('error', '-')} errors, "
              f"{c.get('skipped', '-')} skipped; machine {record['load']['machine_busy']:.0%} busy", flush=True)
    summary = write_report(out, head)["summary"]
    print(f"{summary['green']} of {summary['runs']} run(s) green; {summary['tests_failed_at_least_once']} test(s) "
          f"failed at least once: {out / 'report.md'}", flush=True)
    return 0 if summary["tests_failed_at_least_once"] == 0 and summary["green"] == summary["runs"] else 1


if __name__ == "__main__":
    sys.exit(main())
