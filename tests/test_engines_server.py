"""Engine servers are always stopped (docs/guide/engines.md#stopping-servers), and the load generator never counts
an error as a fast request. Against tests/engine_fakes/fake_server.py: a real HTTP server process tree."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from pytest_autotune.engines.loadgen import (
    MetricsSampler,
    Request,
    percentile,
    run_window,
    run_window_sampled,
)
from pytest_autotune.engines.placement import load_generator_placed, parse_cpu_list, pinned_cpus
from pytest_autotune.engines.server import EngineLaunchError, EngineServer, live_servers
from pytest_autotune.engines.supervisor import kill_tree

sys.path.insert(0, str(Path(__file__).parent / "engine_fakes"))
from support import CONFTEST, FAKE_SERVER, alive, model_table, prepare_cache, processes_matching, wait_until  # noqa: E402

ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}


def fake(tmp_path: Path, *args: str, grace: float = 2.0, timeout: float = 20.0) -> EngineServer:
    return EngineServer(lambda port: [sys.executable, str(FAKE_SERVER), "--port", str(port), *args], env=ENV,
                        log=tmp_path / "server.log", stop_grace_s=grace, launch_timeout_s=timeout)


def test_server_tree_is_stopped_including_an_escaped_grandchild(tmp_path):
    """The server forks workers into its group and a setsid double-forked grandchild that ignores SIGTERM: the
    supervisor (a child subreaper) still finds and kills every one of them."""
    esc, pid = tmp_path / "esc.pid", tmp_path / "srv.pid"
    with fake(tmp_path, "--children", "2", "--escape", str(esc), "--pidfile", str(pid)) as s:
        assert wait_until(lambda: _written(esc) and _written(pid), 5)
        server_pid, escapee = int(pid.read_text()), int(esc.read_text())
        assert alive(server_pid) and alive(escapee)
        assert os.getsid(escapee) != os.getsid(server_pid)  # it left the server's session and process group
        assert s in live_servers()
    assert not alive(server_pid) and not alive(escapee)
    assert not processes_matching(str(tmp_path))
    assert s not in live_servers()
    log = (tmp_path / "server.log").read_text()
    assert "launch attempt 1" in log and "serving on 127.0.0.1" in log and "stopped in" in log


def test_sigterm_ignoring_server_is_killed_after_the_grace(tmp_path):
    pid = tmp_path / "srv.pid"
    s = fake(tmp_path, "--ignore-sigterm", "--pidfile", str(pid), grace=1.0).start()
    server_pid = int(pid.read_text())
    t0 = time.perf_counter()
    s.stop()
    took = time.perf_counter() - t0
    assert not alive(server_pid)
    assert took >= 0.9  # it was given its grace before SIGKILL


def test_failed_start_names_the_root_cause_and_leaves_nothing(tmp_path):
    with pytest.raises(EngineLaunchError) as e:
        fake(tmp_path, "--exit-at-start").start()
    assert "exited during start-up (exit status 3)" in str(e.value)
    assert e.value.cause == "RuntimeError: fake engine refuses this configuration"
    assert not processes_matching(str(tmp_path))


def test_health_timeout_stops_the_server(tmp_path):
    pid = tmp_path / "srv.pid"
    with pytest.raises(EngineLaunchError, match=r"no healthy answer .* within 1 s"):
        fake(tmp_path, "--startup-delay", "30", "--pidfile", str(pid), timeout=1.0).start()
    assert wait_until(lambda: not processes_matching(str(tmp_path)), 5)


def test_a_server_listening_beyond_loopback_is_stopped(tmp_path):
    """A flag or variable that makes the server bind 0.0.0.0 (here: the fake's own --host, given after ours) is
    caught from /proc/net/tcp once it is up, and the server is stopped."""
    pid = tmp_path / "srv.pid"
    with pytest.raises(EngineLaunchError, match=r"listens on 0\.0\.0\.0:\d+, not only on 127\.0\.0\.1"):
        fake(tmp_path, "--host", "0.0.0.0", "--pidfile", str(pid)).start()
    assert wait_until(lambda: not processes_matching(str(tmp_path)), 5)


def test_supervisor_killed_takes_the_server_down(tmp_path):
    """Belt and braces: even a SIGKILL of the supervisor itself kills the server's main process (PDEATHSIG)."""
    pid = tmp_path / "srv.pid"
    s = fake(tmp_path, "--pidfile", str(pid)).start()
    server_pid = int(pid.read_text())
    os.kill(s._sup.pid, signal.SIGKILL)  # noqa: SLF001 - the test plays the OOM killer
    assert wait_until(lambda: not alive(server_pid), 5)
    s.stop()


def test_errors_are_errors_never_fast_requests(tmp_path):
    reqs = [Request(max_tokens=8, prompt=f"prompt {i}") for i in range(30)]
    with fake(tmp_path, "--fail-every", "3", "--token-delay", "0.001") as s:
        stats, results = run_window(s.base_url, "fake", reqs, concurrency=6, timeout_s=10)
    assert stats.errors == 10 and stats.completed == 20
    assert stats.error_kinds == {"http 500": 10}
    assert "injected failure" in stats.first_error
    # throughput counts completed requests only; failed ones enter no latency
    assert stats.requests_per_s == pytest.approx(20 / stats.duration_s)
    assert all(r.ok == (r.error is None) for r in results)
    with fake(tmp_path, "--short") as s:
        stats, _ = run_window(s.base_url, "fake", reqs[:6], concurrency=3, timeout_s=10)
    assert stats.completed == 0 and stats.error_kinds == {"short output": 6}


def test_window_statistics_and_sampled_gauges(tmp_path):
    reqs = [Request(max_tokens=12, prompt=f"p{i}") for i in range(24)]
    chat = [Request(max_tokens=12, messages=(("user", f"p{i}"),)) for i in range(4)]
    seen = []
    with fake(tmp_path, "--slots", "3", "--token-delay", "0.003") as s:
        sampler = MetricsSampler(s.base_url + "/metrics", ("fake:running", "fake:waiting"), 0.02)
        stats, results = run_window_sampled(s.base_url, "fake", reqs, concurrency=8, timeout_s=10, sampler=sampler,
                                            progress=lambda d, t, e, el: seen.append(d))
        cstats, cres = run_window(s.base_url, "fake", chat, concurrency=2, timeout_s=10)
    assert stats.errors == 0 and stats.completed == 24 and stats.output_tokens == 24 * 12
    assert seen == list(range(1, 25))
    assert sampler.maxima["fake:running"] <= 3 and sampler.maxima["fake:waiting"] >= 1
    assert all(r.ttft_s is not None and len(r.itl_s) == 11 for r in results)
    assert stats.ttft_s["p50"] <= stats.latency_s["p50"] <= stats.latency_s["p99"]
    assert cstats.completed == 4 and all(len(r.text.split()) == 12 for r in cres)
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5 and percentile([], 50) is None


# ---------------------------------------------------------------------------------------------- pytest dies


def _killable_session(tmp_path: Path, protocol_text: str) -> tuple[Path, Path, Path]:
    cache = prepare_cache(tmp_path / "cache")
    proj = tmp_path / "proj"
    (proj / "benchmarks" / "engines").mkdir(parents=True)
    (proj / "conftest.py").write_text(CONFTEST)
    (proj / "protocol.toml").write_text(protocol_text)
    esc, pid = tmp_path / "esc.pid", tmp_path / "srv.pid"
    (proj / "benchmarks" / "engines" / "fake.toml").write_text(textwrap.dedent(f"""
        engine = "fake"
        {model_table()}
        [server]
        flags = {{ token-delay = 0.5, children = 2, escape = "{esc}", pidfile = "{pid}" }}
        [workloads.short]
        profile = "short"
        requests = 8
        concurrency = 4
        max_tokens = 64
        [configs.slots-2]
        flags = {{ slots = 2 }}
    """))
    return proj, cache, esc


def test_no_server_survives_when_pytest_dies(tmp_path, fast_protocol):
    """pytest, measuring an engine item whose server is busy, is killed three ways at once (three sessions, each
    with its own timing-lock folder so they run side by side): SIGKILL runs none of pytest's code, SIGINT is
    Ctrl-C, SIGTERM a CI timeout. Every process of every server tree — workers in its group and a setsid'd
    grandchild that ignores SIGTERM — is gone within the grace."""
    protocol = fast_protocol(**{"engines.stop_grace_s": "2.0"})
    runs = {}
    for sig in (signal.SIGKILL, signal.SIGINT, signal.SIGTERM):
        base = tmp_path / sig.name
        proj, cache, esc = _killable_session(base, protocol)
        env = {**os.environ, "PYTEST_AUTOTUNE_ENGINE_CACHE": str(cache), "PYTHONDONTWRITEBYTECODE": "1",
               "PYTEST_AUTOTUNE_LOCK_DIR": str(base / "locks")}
        # SIGINT back to its default in the child: a suite started in the background inherits it ignored, and
        # Python then never turns it into KeyboardInterrupt (nor would pytest under a real Ctrl-C be backgrounded)
        # without hypothesis's pytest plugin: it imports hypothesis in its terminal summary (~1.5-2.5 s here), on
        # the SIGINT and SIGTERM sessions' way out, after their servers are stopped
        proc = subprocess.Popen([sys.executable, "-m", "pytest", "--autotune", "--autotune-exploratory", "-p",
                                 "no:cacheprovider", "-p", "no:hypothesispytest", "benchmarks/engines",
                                 f"--autotune-db={base / 'r.db'}"],
                                cwd=proj, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        runs[sig] = (base, esc, proc)
    try:
        pids = {}
        for sig, (base, esc, proc) in runs.items():
            # the files are written after they are created: wait for their contents, not their names
            assert wait_until(lambda: _written(esc) and _written(base / "srv.pid"), 90), \
                f"{sig.name}: the fake server never started"
            pids[sig] = (int((base / "srv.pid").read_text()), int(esc.read_text()))
        time.sleep(1.0)  # requests in flight
        for sig, (base, esc, proc) in runs.items():
            assert all(alive(p) for p in pids[sig])
            proc.send_signal(sig)
        for sig, (base, esc, proc) in runs.items():
            proc.wait(timeout=60)
    finally:
        for _, _, proc in runs.values():
            if proc.poll() is None:
                proc.kill()
    for sig, (base, esc, proc) in runs.items():
        gone = wait_until(lambda sig=sig, base=base: not any(alive(p) for p in pids[sig])
                          and not processes_matching(str(base)), 30)
        out = proc.stdout.read().decode(errors="replace") if proc.stdout else ""
        assert gone, f"{sig.name}: survivors {processes_matching(str(base))}\n{out[-3000:]}"
        if sig == signal.SIGINT:
            assert "KeyboardInterrupt" in out, out[-3000:]


def _written(path) -> bool:
    """``path`` exists and holds a whole number (a pid file being written reads empty for a moment)."""
    try:
        return path.read_text().strip().isdigit()
    except OSError:
        return False


def test_cpu_lists_parse_as_the_kernel_writes_them():
    assert parse_cpu_list("0-2,5\n") == {0, 1, 2, 5}
    assert parse_cpu_list("3") == {3}
    assert parse_cpu_list("") == frozenset()


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs two CPUs to pin a server to one of them")
def test_load_generator_leaves_the_cpus_a_server_pinned_and_gets_them_back():
    mine = frozenset(os.sched_getaffinity(0))
    engine_cpu = min(mine)
    # a "server" whose grandchild pins itself, as vLLM's worker does (VLLM_CPU_OMP_THREADS_BIND=auto)
    code = ("import os, subprocess, sys, time\n"
            "subprocess.Popen([sys.executable, '-c', "
            f"'import os, time; os.sched_setaffinity(0, {{{engine_cpu}}}); time.sleep(60)'])\n"
            "time.sleep(60)\n")
    server = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and engine_cpu not in pinned_cpus(server.pid, mine):
            time.sleep(0.05)
        assert pinned_cpus(server.pid, mine) == {engine_cpu}
        with load_generator_placed(server.pid) as note:
            assert note is not None and f"pinned CPU(s) {engine_cpu}" in note
            assert os.sched_getaffinity(0) == mine - {engine_cpu}
        assert os.sched_getaffinity(0) == mine
    finally:
        kill_tree(server, 1.0)
    # nothing pinned: nothing moves
    plain = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        with load_generator_placed(plain.pid) as note:
            assert note is None and os.sched_getaffinity(0) == mine
    finally:
        kill_tree(plain, 1.0)
