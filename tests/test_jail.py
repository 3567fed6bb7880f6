"""The jail: every attack class of docs/design/threat-model.md#the-jail as a hostile candidate, run end to
end in a session that times and records, once as the user running the tests and, when that user is root, once
more as an unprivileged user (the user-namespace path).

Every cheat in ``tests/cheats/jail/`` attacks at import time and prints what happened to its sandbox log
(``JAIL-CHEAT <name>: blocked: ...`` or ``SUCCEEDED: ...``); otherwise it computes honestly, so with the jail
each is *accepted* and the session goes on. What the attacks would have harmed is checked from the outside:
the store verifies with every row of the session (honest items before and after the cheats), the listener on
the host's 127.0.0.1 got no connection, no helper outlives the session, the repository's files are unchanged.

To watch the tests go red without the jail: ``AUTOTUNE_JAIL_DISABLE=1 pytest tests/test_jail.py`` runs the
sessions with ``[sandbox].isolation = "off"`` (the kill-controller cheat then ends the session early, so most
tests fail with it; docs/design/threat-model.md records what each attack achieved).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from conftest import REPO, fast_protocol_text

CHEATS = Path(__file__).resolve().parent / "cheats"
JAIL_CHEATS = CHEATS / "jail" / "softmax_rows"
HONEST = CHEATS / "candidates" / "softmax_rows" / "honest_fused.py"
#: why each attack must fail under the jail (a regex over its JAIL-CHEAT line)
BLOCKED_BY = {
    "store_truncate": r"^blocked: no database found$",
    "read_controller": r"^blocked: no controller visible \(pids seen: \[1\]\)",
    "kill_controller": r"^blocked: nothing to kill \(getppid\(\)=0, /proc pids: \[1\]\)",
    "network": r"^blocked: ConnectionRefusedError",
    "setsid_helper": r"^started a setsid helper",  # harmless only because it dies with the sandbox (checked below)
    "fork_bomb": r"^blocked after \d+ processes: BlockingIOError",
    # read-only view (EROFS); as root on the CPU the sandbox's own uid is refused before that (EACCES)
    "write_repo": r"^blocked: (?!.*wrote).*softmax_rows\.py: (OSError: \[Errno 30\] Read-only file system|"
                  r"PermissionError: \[Errno 13\] Permission denied)",
}
DISABLED = bool(os.environ.get("AUTOTUNE_JAIL_DISABLE"))
#: ``AUTOTUNE_JAIL_TEST_DEVICE=cuda`` (run_h200.sh jail): the tester's session on the GPU, where root keeps its uid
DEVICE = os.environ.get("AUTOTUNE_JAIL_TEST_DEVICE", "cpu")
#: a CUDA sandbox starts the driver's threads besides torch's (each counts, as in pids.max): more room there
MAX_PROCESSES = 32 if os.environ.get("AUTOTUNE_JAIL_TEST_DEVICE", "cpu") == "cpu" else 96
#: an unprivileged identity for the user-namespace session (exists on every Debian/Ubuntu system)
NOBODY = 65534


class Listener:
    """A TCP listener on the host's 127.0.0.1 that counts connections (the exfiltration target)."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.connections: list[bytes] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except (socket.timeout, OSError):
                continue
            with conn:
                conn.settimeout(2)
                try:
                    self.connections.append(conn.recv(256))
                except OSError:
                    self.connections.append(b"")

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sock.close()


@dataclass
class JailRun:
    name: str
    root: Path
    report: dict
    stdout: str
    ret: int
    seconds: float
    lines: dict  # cheat -> its JAIL-CHEAT line
    connections: list
    helpers_alive: list
    changed_files: list
    token: str
    db: Path
    extra: dict = field(default_factory=dict)


def _digest(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def _layout(root: Path, port: int, token: str, isolation: str) -> list[Path]:
    """problems/, candidates/softmax_rows/ (an honest item first, the cheats, an honest item last), protocol."""
    shutil.copytree(CHEATS / "problems", root / "problems")
    cand = root / "candidates" / "softmax_rows"
    cand.mkdir(parents=True)
    shutil.copy(HONEST, cand / "a_honest_first.py")
    for src in sorted(JAIL_CHEATS.glob("cheat_*.py")):
        text = src.read_text().replace("__LISTEN_PORT__", str(port)).replace("__TOKEN__", token)
        (cand / src.name).write_text(text)
    shutil.copy(HONEST, cand / "z_honest_last.py")
    (root / "protocol.toml").write_text(fast_protocol_text(**{
        "probes.max_examples": "0", "probes.shape_examples": "0",
        "sandbox.max_processes": str(MAX_PROCESSES), "sandbox.isolation": f'"{isolation}"',
        "breaker.max_speedup": "1000.0", **_timing_gates_relaxed(),
        # the jail is what is tested, not timing precision or correctness: each item is timed for its
        # [timing].min_pairs and no more, on two correctness seeds (every cheat attacks at import, before either)
        "timing.item_budget_s": "0.05", "timing.min_pairs": "4", "timing.warmup_calls": "1",
        "seeds.count": "2"}))
    return [root / "protocol.toml", *sorted((root / "problems").glob("*.py")), *sorted(cand.glob("*.py"))]


#: this session tests the jail, not the timing gates: on a loaded machine a short budget can trip them on an
#: honest candidate, which must not turn these items into refusals
_RELAXED = {"integrity.wall_clock_hidden_abs_s": "10.0", "integrity.wall_clock_hidden_rel": "1.0",
            "integrity.idle_cpu_per_command_s": "10.0", "integrity.idle_cpu_rel": "1.0",
            "integrity.prepare_cpu_max_ratio": "1000.0", "integrity.prepare_cpu_abs_s": "10.0"}


def _timing_gates_relaxed() -> dict:
    return dict(_RELAXED)


def _cheat_lines(tmp: Path) -> dict:
    lines = {}
    for log in sorted(tmp.glob("autotune-sandbox-*/*.log")):
        for m in re.finditer(r"^JAIL-CHEAT (\w+): (.*)$", log.read_text(errors="replace"), re.MULTILINE):
            lines.setdefault(m.group(1), m.group(2))
    return lines


def _helpers(token: str) -> list[int]:
    out = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/comm") as f:
                if f.read().strip() == token[:15]:
                    with open(f"/proc/{p}/stat") as g:
                        if g.read().rsplit(")", 1)[1].split()[0] != "Z":
                            out.append(int(p))
        except OSError:
            continue
    return out


def _finish(name: str, root: Path, tmp: Path, files: list[Path], before: dict, listener: Listener, token: str,
            stdout: str, ret: int, seconds: float) -> JailRun:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and _helpers(token):
        time.sleep(0.1)
    alive = _helpers(token)
    for pid in alive:  # ours to clean up: started by this test's session (found by the token it was given)
        os.kill(pid, signal.SIGKILL)
    listener.close()
    changed = [str(p.relative_to(root)) for p in files if not p.exists() or _digest(p) != before[p]]
    report_path = root / "report.json"
    report = json.loads(report_path.read_text()) if report_path.exists() else {}
    return JailRun(name, root, report, stdout, ret, seconds, _cheat_lines(tmp), listener.connections, alive,
                   changed, token, root / ".autotune" / "results.db")


_AS_NOBODY = r"""
import os, sys
sys.path.insert(0, {repo!r})
from pytest_autotune.sandbox import jail_mounts, jail_plan, linux
# as root, before becoming nobody: a mount namespace in which the interpreter (pyenv keeps it in /root, 0700)
# is reachable by an unprivileged uid -- the same step the jail uses for its own sandbox uid
linux.unshare(linux.CLONE_NEWNS)
linux.mount(None, "/", None, linux.MS_REC | linux.MS_PRIVATE)
jail_mounts.expose_paths(jail_plan.interpreter_paths())
os.setgroups([])
os.setresgid({uid}, {uid}, {uid})
os.setresuid({uid}, {uid}, {uid})
os.execv(sys.executable, [sys.executable, "-m", "pytest", *sys.argv[1:]])
"""


def _session(who: str) -> JailRun:
    """One session in a fresh folder outside /tmp (the jail gives every sandbox a private /tmp, which would hide
    a repository there: the read-only view and the hidden store are what must be tested), run by this test's user
    (``tester``) or, from root, by an unprivileged one (``nobody``)."""
    base = "/var/tmp" if os.path.isdir("/var/tmp") else None
    root = Path(tempfile.mkdtemp(prefix=f"autotune-jail-{who}-", dir=base))
    root.chmod(0o755)  # a repository others may read, as a checkout usually is: the view must make it read-only
    listener = Listener()
    token = "atj" + uuid.uuid4().hex[:10]
    files = _layout(root, listener.port, token, "off" if DISABLED else "preferred")
    before = {p: _digest(p) for p in files}
    tmp = root / "tmp"
    tmp.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "COV_"))}
    env.update({"TMPDIR": str(tmp), "PYTHONDONTWRITEBYTECODE": "1"})
    args = ["--autotune", "--autotune-exploratory", "--problems", "problems", "--candidates", "candidates",
            "--autotune-json", str(root / "report.json"), "-p", "no:cacheprovider", "-q", "-W",
            "always::pytest.PytestWarning", f"--rootdir={root}", f"--device={DEVICE}"]
    if who == "gpu-host":  # as the GPU host's jail: root keeps its uid, no cgroup, the task supervisor
        env["AUTOTUNE_JAIL_EMULATE"] = "gpu-host"
    if who == "nobody":
        for d, _dirs, fs in os.walk(root):
            for n in [d, *(os.path.join(d, f) for f in fs)]:
                os.chown(n, NOBODY, NOBODY)
        env["HOME"] = str(root)
        cmd = [sys.executable, "-c", _AS_NOBODY.format(repo=str(REPO), uid=NOBODY), *args]
    else:
        cmd = [sys.executable, "-m", "pytest", *args]
    t0 = time.monotonic()
    out = subprocess.run(cmd, check=False, cwd=str(root), env=env, capture_output=True, text=True, timeout=600,
                         stdin=subprocess.DEVNULL)
    return _finish(who, root, tmp, files, before, listener, token, out.stdout + out.stderr, out.returncode,
                   time.monotonic() - t0)


@pytest.fixture(scope="module", autouse=True)
def _jail_available():
    """As root (CI) the full jail must be there: never skip. A normal user's machine may forbid user namespaces;
    then these tests skip, naming what is missing (the warning a session would print)."""
    if not sys.platform.startswith("linux"):
        pytest.skip("the jail is Linux only")
    if os.geteuid() != 0:
        from pytest_autotune.sandbox.jail_plan import plan_jail

        plan = plan_jail("preferred", "cpu", (), 1 << 30, MAX_PROCESSES)
        if plan.level != "full":
            pytest.skip(plan.warning())


@pytest.fixture(scope="module")
def jail_runs():
    runs: dict[str, JailRun] = {}

    def get(name: str) -> JailRun:
        if name not in runs:
            runs[name] = _session(name)
        return runs[name]

    try:
        yield get
    finally:
        for run in runs.values():
            print(f"jail session as {run.name}: {run.seconds:.0f} s")
            shutil.rmtree(run.root, ignore_errors=True)


def _no_task_supervisor() -> str:
    if not sys.platform.startswith("linux") or os.geteuid() != 0:
        return "the GPU host's jail (root keeping its uid) needs root"
    from pytest_autotune.sandbox.task_limit import unavailable

    return unavailable()


SESSIONS = ["tester", pytest.param("nobody", marks=pytest.mark.skipif(
    not sys.platform.startswith("linux") or os.geteuid() != 0 or DEVICE != "cpu",
    reason="running a session as an unprivileged user needs root (as a normal user, the 'tester' session already "
           "takes the user-namespace path)")),
    # the GPU host's jail on this CPU: the sandbox keeps root's uid (CUDA IPC needs it there), no cgroup, so its
    # helpers are counted by its pid namespace and its tasks bounded by the task supervisor (docs/design/threat-model.md)
    pytest.param("gpu-host", marks=pytest.mark.skipif(bool(_no_task_supervisor()) or DEVICE != "cpu",
                                                      reason=_no_task_supervisor() or "the tester's session is on CUDA"))]


def _explain(run: JailRun) -> str:
    return f"session as {run.name} (exit {run.ret}):\n{run.stdout[-4000:]}\ncheat lines: {run.lines}"


@pytest.mark.parametrize("who", SESSIONS)
@pytest.mark.parametrize("cheat", sorted(BLOCKED_BY))
def test_attack_fails_because_of_the_jail(jail_runs, who: str, cheat: str) -> None:
    """The attack ran (its line is in the sandbox log), failed for the jail's reason, and the candidate -- honest
    apart from the attack -- was accepted: the session went on."""
    run = jail_runs(who)
    line = run.lines.get(cheat)
    assert line is not None, f"cheat_{cheat} never ran\n{_explain(run)}"
    assert re.search(BLOCKED_BY[cheat], line), f"cheat_{cheat}: {line}\n{_explain(run)}"
    items = {it["candidate"]: it for it in run.report.get("items", [])}
    it = items.get(f"cheat_{cheat}")
    assert it is not None, _explain(run)
    if cheat in _refused_here(run):
        # alive during timing and counted by the controller: the helper-process rule refuses the item, naming it
        assert (it["verdict"], it["gate"]) == ("rejected", "integrity") and "process" in it["reason"], it
        assert re.search(r"pid \d+ '\w+' \(a session of its own", it["reason"]), it["reason"]
    else:
        assert it["verdict"] == "accepted", f"{it}\n{_explain(run)}"


def _refused_here(run: "JailRun") -> set[str]:
    """Attacks refused by a gate besides failing: the setsid helper lives during timing, and the controller counts
    it from the host's /proc by the sandbox's pid namespace, or from its cgroup (measure/helper_watch.py)."""
    iso = run.report.get("run", {}).get("isolation") or {}
    counted = "pid" in (iso.get("namespaces") or ()) or str(iso.get("limits", "")).startswith("cgroup")
    return {"setsid_helper"} if counted else set()


@pytest.mark.parametrize("who", SESSIONS)
def test_nothing_lost_and_the_store_verifies(jail_runs, who: str) -> None:
    """Every item has its row -- the honest ones before and after the store attack included -- and ``autotune
    verify`` passes; the run was closed (the controller lived to the end)."""
    run = jail_runs(who)
    refused = {f"cheat_{c}" for c in _refused_here(run)}
    assert run.ret == (1 if refused else 0), _explain(run)
    assert {it["candidate"] for it in run.report["items"] if it["verdict"] != "accepted"} == refused, _explain(run)
    names = {it["candidate"] for it in run.report["items"]}
    with sqlite3.connect(str(run.db)) as conn:
        rows = {r[0] for r in conn.execute("SELECT candidate FROM results")}
        finished = conn.execute("SELECT COUNT(*) FROM runs WHERE finished_at IS NOT NULL").fetchone()[0]
    # a refused item is not a result: its row is in the rejections table
    assert rows == names - refused and {"a_honest_first", "z_honest_last"} <= rows, (rows, names)
    assert finished == 1
    v = subprocess.run([sys.executable, "-m", "pytest_autotune.cli", "verify", "--db", str(run.db)], check=False,
                       capture_output=True, text=True, timeout=120, cwd=str(REPO))
    assert v.returncode == 0, v.stdout + v.stderr


@pytest.mark.parametrize("who", SESSIONS)
def test_no_host_address_no_survivor_no_write(jail_runs, who: str) -> None:
    """From the outside: the host's 127.0.0.1 listener saw nobody, the setsid helper died with its sandbox, and
    the problem, the other candidates and protocol.toml are byte for byte what they were."""
    run = jail_runs(who)
    assert run.connections == [], run.connections
    assert run.helpers_alive == [], f"setsid helpers {run.helpers_alive} outlived their sandbox"
    assert run.changed_files == [], run.changed_files


@pytest.mark.parametrize("who", SESSIONS)
def test_isolation_is_recorded_and_shown(jail_runs, who: str) -> None:
    """The run's provenance and every result's say which jail measured it; so do the terminal and the JSON
    report. Root gets a uid of its own; an unprivileged user, a user namespace."""
    run = jail_runs(who)
    iso = run.report["run"]["isolation"]
    expected = ("userns" if (who == "nobody" or os.geteuid() != 0)
                else "same-uid" if who == "gpu-host" or DEVICE == "cuda" else "uid")
    if who == "gpu-host":
        assert "task supervisor" in iso["limits"] and iso["level"] == "full", iso
    assert iso["identity"] == expected, iso
    assert {"pid", "net", "mount", "ipc"} <= set(iso["namespaces"]) and iso["seccomp"] and iso["view"], iso
    assert re.search(r"^sandbox isolation: ", run.stdout, re.MULTILINE), run.stdout[-2000:]
    with sqlite3.connect(str(run.db)) as conn:
        provs = [json.loads(p) for (p,) in conn.execute("SELECT provenance FROM results")]
    assert provs and all(p["isolation"]["identity"] == expected for p in provs)
    if iso["level"] != "full":  # one loud warning, naming what is missing and how to get it
        assert run.stdout.count("sandbox isolation is ") == 1, run.stdout[-3000:]
        for part in iso["missing"]:
            assert f"  - {part}: " in run.stdout
