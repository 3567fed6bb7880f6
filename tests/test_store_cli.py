"""The validator seen from the sqlite3 shell, and the ``autotune`` command (verify, show, quarantine, merge,
protocol digest) with its exit codes."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from test_store_crash import ENV
from test_store_schema import (
    N_SEEDS,
    PROTO,
    fill,
    insert_statement,
    make_engine_result,
    make_measurement,
    make_result,
    make_run,
    new_store,
    nonce_for,
    raw_row,
)

from pytest_autotune import cli
from pytest_autotune.result import QuarantineRecord

SQLITE3 = shutil.which("sqlite3")
needs_sqlite3 = pytest.mark.skipif(SQLITE3 is None, reason="the sqlite3 command-line shell is not installed")


def shell(db: Path, sql: str) -> subprocess.CompletedProcess:
    return subprocess.run([SQLITE3, str(db), sql], check=False, capture_output=True, text=True, timeout=60)


def autotune(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pytest_autotune.cli", *args], check=False, capture_output=True, text=True, env=ENV, cwd=cwd,
        timeout=120,
    )


def _store(tmp_path: Path, *, finish: bool = True) -> Path:
    run = make_run()
    store = new_store(tmp_path / "results.db", run)
    fill(store, run, 4)
    if finish:
        store.finish_run(run.run_id, nonce_for(run.run_id))
    store.close()
    return tmp_path / "results.db"


# ---------------------------------------------------------------------------------------------- sqlite3 shell


@needs_sqlite3
def test_sqlite3_shell_insert_without_paired_seeds_is_aborted(tmp_path):
    run = make_run()
    store = new_store(tmp_path / "results.db", run)
    conn = store._conn
    row = raw_row(conn, "results", make_engine_result(run, 0, seeds=range(N_SEEDS)).as_row(),
                  nonce_for(run.run_id))
    store.close()
    db = tmp_path / "results.db"
    for seeds in ("[]", "[1, 2]", "[7, 7, 7, 7, 7, 7]"):
        out = shell(db, insert_statement("results", dict(row, seeds=seeds)))
        assert out.returncode != 0
        assert "paired_seeds:" in out.stderr, out.stderr
    # the very same statement with its seeds goes through: the shell was refused only for the seeds
    ok = shell(db, insert_statement("results", dict(row, seeds=str(list(range(N_SEEDS))))))
    assert ok.returncode == 0, ok.stderr
    assert shell(db, "SELECT count(*) FROM results").stdout.strip() == "1"


@needs_sqlite3
@pytest.mark.parametrize(
    "patch, rule",
    [
        ({"speedup": 40.0, "ci_low": 39.0, "ci_high": 41.0}, "breaker"),
        ({"correctness": "failed"}, "correctness_passed"),
        ({"n_pairs": 3}, "min_pairs"),
        ({"run_id": "ghost"}, "run_exists"),
        ({"protocol_sha256": "f" * 64}, "protocol_digest"),
        ({"prev_hash": "e" * 64}, "hash_chain"),
    ],
)
def test_sqlite3_shell_refusals_name_the_rule(tmp_path, patch, rule):
    run = make_run()
    store = new_store(tmp_path / "results.db", run)
    row = raw_row(store._conn, "results", make_result(run).as_row(), nonce_for(run.run_id))
    store.close()
    out = shell(tmp_path / "results.db", insert_statement("results", dict(row, **patch)))
    assert out.returncode != 0
    assert f"{rule}" in out.stderr, out.stderr


@needs_sqlite3
def test_sqlite3_shell_update_and_delete_fail(tmp_path):
    db = _store(tmp_path)
    for sql, rule in [
        ("UPDATE results SET speedup = 9.0 WHERE id = 1;", "results_append_only"),
        ("DELETE FROM results WHERE id = 4;", "results_append_only"),
        ("UPDATE runs SET exploratory = 1;", "runs_finish_once"),
        ("DELETE FROM runs;", "runs_append_only"),
    ]:
        out = shell(db, sql)
        assert out.returncode != 0 and rule in out.stderr, (sql, out.stderr)
    assert shell(db, "SELECT count(*) FROM results").stdout.strip() == "4"
    assert autotune("verify", "--db", str(db)).returncode == 0


@needs_sqlite3
def test_hand_edited_row_is_reported_by_verify(tmp_path):
    db = _store(tmp_path)
    saved = sqlite3.connect(db).execute(
        "SELECT sql FROM sqlite_master WHERE name = 'results_append_only_update'"
    ).fetchone()[0]
    edit = (
        "DROP TRIGGER results_append_only_update; UPDATE results SET speedup = 2.05 WHERE id = 2; " + saved + ";"
    )
    out = shell(db, edit)
    assert out.returncode == 0, out.stderr
    assert shell(db, "SELECT speedup FROM results WHERE id = 2").stdout.strip() == "2.05"
    res = autotune("verify", "--db", str(db))
    assert res.returncode == 1, res.stdout + res.stderr
    assert "results row 2 was edited (row_hash mismatch)" in res.stdout


@needs_sqlite3
def test_dropped_trigger_is_reported_by_verify(tmp_path):
    db = _store(tmp_path)
    assert shell(db, "DROP TRIGGER results_breaker;").returncode == 0
    res = autotune("verify", "--db", str(db))
    assert res.returncode == 1
    assert "trigger results_breaker is missing" in res.stdout


# ---------------------------------------------------------------------------------------------- autotune


def test_verify_ok_and_default_db(tmp_path):
    (tmp_path / ".autotune").mkdir()
    _store(tmp_path / ".autotune")
    res = autotune("verify", cwd=tmp_path)  # default --db: .autotune/results.db under the current directory
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.splitlines()[1].startswith("OK: ")


def test_store_errors_exit_2_with_the_fix(tmp_path):
    res = autotune("verify", "--db", str(tmp_path / "missing.db"))
    assert res.returncode == 2
    assert "does not exist" in res.stderr and str(tmp_path / "missing.db") in res.stderr
    bad = tmp_path / "bad.db"
    bad.write_bytes(b"definitely not sqlite" * 100)
    res = autotune("show", "--db", str(bad))
    assert res.returncode == 2 and "not a SQLite database" in res.stderr
    assert bad.read_bytes() == b"definitely not sqlite" * 100
    assert autotune().returncode == 2  # usage: no subcommand
    assert autotune("quarantine").returncode == 2
    assert autotune("merge", "a.db").returncode == 2  # -o is required


def test_show_prints_results(tmp_path):
    db = _store(tmp_path)
    res = autotune("show", "--db", str(db))
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0].split()[:4] == ["id", "run", "kind", "problem"]
    assert len(lines) == 2 + 4
    assert "2.000x" in lines[2] and "[1.900, 2.100]" in lines[2]
    res = autotune("show", "--db", str(db), "--run", "run-A")
    assert res.returncode == 0 and len(res.stdout.splitlines()) == 6
    res = autotune("show", "--db", str(db), "--run", "nope")
    assert res.returncode == 2


def test_quarantine_list_and_release(tmp_path):
    run = make_run()
    store = new_store(tmp_path / "results.db", run)
    fast = make_result(run, 1, measurement=make_measurement(speedup=30.0))
    qid = store.record_quarantine(QuarantineRecord(fast, "30x is above the 10x breaker"), nonce=nonce_for(run.run_id))
    store.close()
    db = tmp_path / "results.db"
    res = autotune("quarantine", "list", "--db", str(db))
    assert res.returncode == 0 and "30x is above the 10x breaker" in res.stdout
    res = autotune("quarantine", "release", str(qid), "--reason", "short", "--by", "alice", "--db", str(db))
    assert res.returncode == 2 and "release_reason" in res.stderr
    res = autotune(
        "quarantine", "release", str(qid), "--reason", "profiled: the kernel is genuine", "--by", "alice", "--db", str(db)
    )
    assert res.returncode == 0, res.stderr
    assert "released:1" in res.stdout
    res = autotune("quarantine", "list", "--db", str(db))
    assert "release 1 by alice: profiled: the kernel is genuine" in res.stdout
    res = autotune("quarantine", "release", "99", "--reason", "no such quarantine row", "--db", str(db))
    assert res.returncode == 2 and "release_target" in res.stderr


def test_protocol_digest(tmp_path):
    res = autotune("protocol", "digest", str(PROTO.path))
    assert res.returncode == 0
    assert res.stdout.split()[0] == PROTO.sha256
    res = autotune("protocol", "digest", str(tmp_path / "nope.toml"))
    assert res.returncode == 2 and "cannot read protocol file" in res.stderr


def test_merge_exit_codes(tmp_path):
    a = tmp_path / "a"
    a.mkdir()
    db = _store(a)
    res = autotune("merge", str(db), "-o", str(tmp_path / "all.db"))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "inserted 5 row(s)" in res.stdout
    edited = tmp_path / "edited.db"
    shutil.copy(db, edited)
    conn = sqlite3.connect(edited)
    conn.execute("DROP TRIGGER results_append_only_update")
    conn.execute("UPDATE results SET speedup = 2.02 WHERE id = 1")
    conn.commit()
    conn.close()
    res = autotune("merge", str(edited), "-o", str(tmp_path / "all2.db"))
    assert res.returncode == 1 and "fails verify" in res.stdout


def test_dispatcher_accepts_new_subcommands(capsys):
    from pytest_autotune.commands import registry

    @registry.command
    def _hello(sub):
        p = sub.add_parser("hello-test")
        p.set_defaults(func=lambda args: 0)

    try:
        assert cli.main(["hello-test"]) == 0
    finally:
        registry._COMMANDS.remove(_hello)
    with pytest.raises(SystemExit) as info:
        cli.main(["hello-test"])
    assert info.value.code == 2
