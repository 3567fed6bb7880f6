"""Crash safety (a SIGKILLed writer) and files the store must refuse without touching them."""

from __future__ import annotations

import hashlib
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from test_store_schema import REPO, fill, make_run, new_store, nonce_for

from pytest_autotune.errors import StoreError
from pytest_autotune.store import SCHEMA_VERSION, ResultStore

ENV = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}

WRITER = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {tests!r})
    from test_store_schema import make_result, make_run, new_store, nonce_for
    run = make_run("crash-run")
    store = new_store({db!r}, run)
    nonce = nonce_for(run.run_id)
    for i in range(100000):
        rid = store.record_result(make_result(run, i), nonce=nonce)
        print(rid, flush=True)
    """
)


def _autotune(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pytest_autotune.cli", *args],
        check=False, capture_output=True,
        text=True,
        env=ENV,
        cwd=cwd,
        timeout=120,
    )


def test_sigkilled_writer_leaves_every_committed_row_intact(tmp_path):
    db = tmp_path / "results.db"
    script = WRITER.format(tests=str(REPO / "tests"), db=str(db))
    proc = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV
    )
    committed: list[int] = []
    try:
        for line in proc.stdout:
            committed.append(int(line))
            if len(committed) >= 40:
                break
        assert len(committed) >= 40, proc.stderr.read()
    finally:
        # no grace period: the writer is in the middle of its next transaction (or between two)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    assert (tmp_path / "results.db-wal").exists()  # WAL mode: the log a killed writer leaves behind

    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    ids = [r[0] for r in conn.execute("SELECT id FROM results ORDER BY id")]
    # every row the writer saw committed is there; at most the one it was writing when killed beyond that
    assert ids[: len(committed)] == committed
    assert ids == list(range(1, len(ids) + 1))
    # no partial row: every column of every row is there and the chain state agrees with the last row
    assert conn.execute("SELECT count(*) FROM results WHERE seeds IS NULL OR row_hash IS NULL").fetchone()[0] == 0
    state = conn.execute("SELECT head, count FROM chain_state WHERE tbl = 'results'").fetchone()
    last = conn.execute("SELECT row_hash FROM results ORDER BY id DESC LIMIT 1").fetchone()[0]
    assert state == (last, len(ids))
    conn.close()

    out = _autotune("verify", "--db", str(db))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "unfinished" in out.stdout  # the killed run is a note, not a failure
    store = ResultStore.open(db, readonly=True)
    report = store.verify()
    store.close()
    assert report.ok, report.problems
    assert report.counts["results"] == len(ids) and report.counts["runs_unfinished"] == 1


# ---------------------------------------------------------------------------------------------- bad files


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _store_file(tmp_path: Path) -> Path:
    run = make_run()
    store = new_store(tmp_path / "r.db", run)
    fill(store, run, 3)
    store.finish_run(run.run_id, nonce_for(run.run_id))
    store.close()  # the last connection checkpoints the WAL into the file
    return tmp_path / "r.db"


def test_locked_database_is_refused(tmp_path):
    db = _store_file(tmp_path)
    before = _digest(db)
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(StoreError) as info:
            ResultStore.open(db, busy_timeout_s=0.2)
        msg = str(info.value)
        assert str(db) in msg and "locked by another writer" in msg and "--autotune-db" in msg
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert _digest(db) == before
    ResultStore.open(db).close()  # fine once the lock is gone


def _make_immutable(path: Path) -> bool:
    """chattr +i: the one read-only mechanism that also binds root (where chmod does not)."""
    try:
        r = subprocess.run(["chattr", "+i", str(path)], check=False, capture_output=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return r.returncode == 0


def _undo_immutable(path: Path) -> None:
    subprocess.run(["chattr", "-i", str(path)], check=False, capture_output=True, timeout=10)


@pytest.fixture
def read_only_file(tmp_path):
    db = _store_file(tmp_path)
    if os.geteuid() != 0:
        db.chmod(0o444)
        yield db
        db.chmod(0o644)
        return
    # root ignores permission bits: use the immutable attribute if this filesystem has it
    if not _make_immutable(db):
        pytest.skip("running as root, where chmod 0444 does not stop writes, and chattr +i is unavailable here")
    try:
        yield db
    finally:
        _undo_immutable(db)


def test_read_only_file_is_refused(read_only_file):
    db = read_only_file
    before = _digest(db)
    with pytest.raises(StoreError) as info:
        ResultStore.open(db)
    msg = str(info.value)
    assert str(db) in msg and "read-only" in msg
    assert _digest(db) == before
    # reading it is fine
    with ResultStore.open(db, readonly=True) as store:
        assert len(store.results()) == 3


@pytest.fixture
def read_only_dir(tmp_path):
    d = tmp_path / "ro"
    d.mkdir()
    db = _store_file(d)
    if os.geteuid() != 0:
        d.chmod(0o555)
        yield db
        d.chmod(0o755)
        return
    if not _make_immutable(d):
        pytest.skip("running as root, where chmod does not stop writes, and chattr +i is unavailable here")
    try:
        yield db
    finally:
        _undo_immutable(d)


def test_read_only_directory_is_refused(read_only_dir):
    db = read_only_dir
    before = _digest(db)
    with pytest.raises(StoreError) as info:
        ResultStore.open(db)
    assert str(db.parent) in str(info.value) and "not writable" in str(info.value)
    assert _digest(db) == before
    with pytest.raises(StoreError) as info:
        ResultStore.open(db.parent / "sub" / "new.db")
    assert "sub" in str(info.value)


def test_corrupt_file_is_refused_untouched(tmp_path):
    db = tmp_path / "results.db"
    db.write_bytes(os.urandom(8192))
    before = _digest(db)
    for readonly in (False, True):
        with pytest.raises(StoreError) as info:
            ResultStore.open(db, readonly=readonly)
        assert str(db) in str(info.value) and "not a SQLite database" in str(info.value)
    assert _digest(db) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.db"]


def test_damaged_database_is_refused_untouched(tmp_path):
    """A real SQLite file whose pages were overwritten: the header is fine, quick_check is not."""
    run = make_run()
    store = new_store(tmp_path / "r.db", run)
    fill(store, run, 60)
    store.close()
    db = tmp_path / "r.db"
    data = bytearray(db.read_bytes())
    page = int.from_bytes(data[16:18], "big")
    assert len(data) > 6 * page
    data[3 * page : 6 * page] = os.urandom(3 * page)
    db.write_bytes(bytes(data))
    before = _digest(db)
    with pytest.raises(StoreError) as info:
        ResultStore.open(db)
    assert str(db) in str(info.value)
    assert _digest(db) == before


def test_newer_schema_is_refused_untouched(tmp_path):
    db = _store_file(tmp_path)
    conn = sqlite3.connect(db)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.commit()
    conn.close()
    before = _digest(db)
    for readonly in (False, True):
        with pytest.raises(StoreError) as info:
            ResultStore.open(db, readonly=readonly)
        msg = str(info.value)
        assert str(db) in msg
        assert f"was written by a newer pytest-autotune (schema {SCHEMA_VERSION + 1} > {SCHEMA_VERSION})" in msg
        assert "upgrade pytest-autotune or use another --autotune-db" in msg
    assert _digest(db) == before


def test_foreign_database_is_refused_untouched(tmp_path):
    db = tmp_path / "other.db"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE notes (x TEXT)")
    conn.commit()
    conn.close()
    before = _digest(db)
    with pytest.raises(StoreError, match="not a pytest-autotune results store"):
        ResultStore.open(db)
    assert _digest(db) == before


def test_missing_file_read_only_and_directory_path(tmp_path):
    with pytest.raises(StoreError, match="does not exist"):
        ResultStore.open(tmp_path / "nope.db", readonly=True)
    assert not (tmp_path / "nope.db").exists()
    with pytest.raises(StoreError, match="not a regular file"):
        ResultStore.open(tmp_path)
    # a new path: parent directories are created
    store = ResultStore.open(tmp_path / "a" / "b" / "results.db")
    store.close()
    assert (tmp_path / "a" / "b" / "results.db").is_file()
