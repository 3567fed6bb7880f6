"""``merge_databases``: runs copied through the target's validator, re-chained, duplicates skipped, tampered
rows refused."""

from __future__ import annotations

import shutil
import sqlite3

import pytest
from test_store_schema import (
    PROTO,
    drop_and_recreate,
    fill,
    insert_sql,
    make_measurement,
    make_result,
    make_run,
    new_store,
    nonce_for,
    raw_row,
)

from pytest_autotune.errors import StoreError
from pytest_autotune.result import QuarantineRecord, Rejection
from pytest_autotune.store import ResultStore, merge_databases


def _source(path, run_ids, *, n=3, finish=True, quarantine=False):
    runs = [make_run(r) for r in run_ids]
    store = new_store(path, *runs)
    for run in runs:
        nonce = nonce_for(run.run_id)
        fill(store, run, n)
        store.record_rejection(Rejection(run.run_id, "x::bad", "p", "c", "cpu", "correctness", "rejected", "wrong"))
        if quarantine:
            fast = make_result(run, 50, measurement=make_measurement(speedup=25.0))
            qid = store.record_quarantine(QuarantineRecord(fast, "25x, above the breaker"), nonce=nonce)
            rel = store.release_quarantine(qid, "checked by hand, genuine", "alice")
            store.record_result(
                make_result(run, 50, measurement=make_measurement(speedup=25.0), breaker=f"released:{rel}"),
                nonce=nonce,
            )
        if finish:
            store.finish_run(run.run_id, nonce)
    store.close()
    return path


def _content(rows):
    drop = {"id", "prev_hash", "row_hash", "breaker", "row_mac"}
    return sorted(tuple(sorted((k, v) for k, v in r.items() if k not in drop)) for r in rows)


def test_merge_two_stores_verifies(tmp_path):
    a = _source(tmp_path / "a.db", ["run-1", "run-2"], quarantine=True)
    b = _source(tmp_path / "b.db", ["run-3"], n=4, quarantine=True)
    target = tmp_path / "out" / "all.db"
    report = merge_databases([a, b], target)
    assert report.ok, report.messages
    assert report.refused == 0 and report.skipped == 0
    assert report.by_table == {"runs": 3, "quarantine": 3, "quarantine_releases": 3, "rejections": 3, "results": 13}
    with ResultStore.open(target, readonly=True) as t:
        v = t.verify()
        assert v.ok, v.problems
        assert v.counts["runs_unfinished"] == 0
        rows = t.results()
        # re-chained in the target
        assert rows[0]["prev_hash"] == "0" * 64
        assert all(rows[i]["prev_hash"] == rows[i - 1]["row_hash"] for i in range(1, len(rows)))
        # released rows point at the target's release ids, each for its own problem/candidate
        released = [r for r in rows if r["breaker"] != "ok"]
        assert sorted(r["breaker"] for r in released) == ["released:1", "released:2", "released:3"]
        # and the content is the sources' (row_mac untouched for rows whose content did not change)
        with ResultStore.open(a, readonly=True) as sa, ResultStore.open(b, readonly=True) as sb:
            src_rows = sa.results() + sb.results()
        assert _content(rows) == _content(src_rows)
        macs = {(r["run_id"], r["nodeid"]): r["row_mac"] for r in src_rows if r["breaker"] == "ok"}
        assert all(macs[(r["run_id"], r["nodeid"])] == r["row_mac"] for r in rows if r["breaker"] == "ok")
        assert {r["run_id"]: r["finished_at"] for r in t.runs()} == {
            r["run_id"]: r["finished_at"] for s in (a, b) for r in ResultStore.open(s, readonly=True).runs()
        }


def test_merging_the_same_source_twice_inserts_nothing(tmp_path):
    a = _source(tmp_path / "a.db", ["run-1"], quarantine=True)
    target = tmp_path / "all.db"
    first = merge_databases([a], target)
    assert first.ok and first.inserted > 0
    before = target.read_bytes()
    second = merge_databases([a], target)
    assert second.ok, second.messages
    assert second.inserted == 0
    assert second.skipped == 2  # the run, and its release
    assert any("already in the target; skipped as a duplicate" in m for m in second.messages)
    with ResultStore.open(target, readonly=True) as t:
        assert len(t.results()) == 4 and t.verify().ok
    assert len(before) > 0


def test_tampered_source_is_refused_and_force_refuses_the_row(tmp_path):
    a = _source(tmp_path / "a.db", ["run-1"], n=5)
    tampered = tmp_path / "tampered.db"
    shutil.copy(a, tampered)
    conn = sqlite3.connect(tampered)
    conn.execute("DROP TRIGGER results_append_only_update")
    conn.execute("UPDATE results SET speedup = 2.09, ci_high = 2.2 WHERE id = 3")
    conn.commit()
    conn.close()

    report = merge_databases([tampered], tmp_path / "all.db")
    assert not report.ok
    assert report.sources_refused == 1 and report.inserted == 0
    assert any("fails verify" in m and "results row 3 was edited" in m for m in report.messages)

    # --force: merged row by row; the tampered row is refused (its MAC no longer matches the revealed nonce)
    report = merge_databases([tampered], tmp_path / "forced.db", force=True)
    assert not report.ok
    assert report.refused == 1
    assert any("results row 3 refused: row_mac does not match" in m for m in report.messages)
    with ResultStore.open(tmp_path / "forced.db", readonly=True) as t:
        assert len(t.results()) == 4
        assert 2.09 not in [r["speedup"] for r in t.results()]
        assert t.verify().ok


def test_force_still_runs_the_validator(tmp_path):
    """A source row that bypassed the validator (triggers dropped, then restored; hash and MAC correct, made with
    the revealed nonce) fails the source's verify (replay), and with --force the target's validator refuses it."""
    a = _source(tmp_path / "a.db", ["run-1"], n=2)
    run = make_run("run-1")
    conn = sqlite3.connect(a)
    forged = make_result(run, 9, measurement=make_measurement(speedup=80.0)).as_row()
    sql, params = insert_sql("results", raw_row(conn, "results", forged, nonce_for(run.run_id)))
    drop_and_recreate(conn, ["results_breaker", "results_run_open"], sql, params)
    conn.close()

    report = merge_databases([a], tmp_path / "all.db")
    assert report.sources_refused == 1 and report.inserted == 0

    report = merge_databases([a], tmp_path / "forced.db", force=True)
    assert report.refused == 1
    assert any("results row 3 refused by the validator: breaker:" in m for m in report.messages), report.messages
    with ResultStore.open(tmp_path / "forced.db", readonly=True) as t:
        assert [r["speedup"] for r in t.results()] == [2.0, 2.0]
        assert t.verify().ok


def test_unfinished_source_run_stays_unfinished(tmp_path):
    a = _source(tmp_path / "a.db", ["run-1"], finish=False)
    report = merge_databases([a], tmp_path / "all.db")
    assert report.ok, report.messages
    assert any("run-1 is unfinished in the source: merged, left unfinished" in m for m in report.messages)
    with ResultStore.open(tmp_path / "all.db", readonly=True) as t:
        (run,) = t.runs()
        assert run["finished_at"] is None and run["nonce"] is None
        v = t.verify()
        assert v.ok and any("unfinished" in n for n in v.notes)
    # the writer of run-1 may still finish it in its own store; merging again later does not duplicate it
    again = merge_databases([a], tmp_path / "all.db")
    assert again.inserted == 0


def test_merge_into_itself_is_refused(tmp_path):
    a = _source(tmp_path / "a.db", ["run-1"])
    with pytest.raises(StoreError, match="into itself"):
        merge_databases([a], a)


def test_unreadable_source_is_reported(tmp_path):
    bad = tmp_path / "bad.db"
    bad.write_bytes(b"garbage" * 1000)
    good = _source(tmp_path / "a.db", ["run-1"])
    report = merge_databases([bad, good], tmp_path / "all.db")
    assert report.sources_refused == 1 and report.by_table["results"] == 3
    assert any(str(bad) in m and "not a SQLite database" in m for m in report.messages)


def test_same_run_in_two_sources_is_merged_once(tmp_path):
    """The same run_id in two sources: the second copy is skipped as a duplicate, the other runs are merged."""
    a = _source(tmp_path / "a.db", ["run-1"])
    b = _source(tmp_path / "b.db", ["run-1", "run-2"])
    report = merge_databases([a, b], tmp_path / "all.db")
    assert report.ok
    assert report.skipped == 1
    with ResultStore.open(tmp_path / "all.db", readonly=True) as t:
        assert sorted(r["run_id"] for r in t.runs()) == ["run-1", "run-2"]
        assert len(t.results("run-1")) == 3 and len(t.results("run-2")) == 3
        assert t.verify().ok


def test_run_id_collision_is_refused(tmp_path):
    a = _source(tmp_path / "a.db", ["run-1"])
    store = ResultStore.open(tmp_path / "b.db")
    store.register_protocol(PROTO, frozen=True)
    other = make_run("run-1")
    other = type(other)(**{**other.__dict__, "host": "another-host"})
    store.begin_run(other)
    store.close()
    report = merge_databases([a, tmp_path / "b.db"], tmp_path / "all.db")
    assert report.refused == 1 and not report.ok
    assert any("run_id collision" in m for m in report.messages)
