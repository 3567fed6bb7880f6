"""The held-out retest link in the store (migration 0002_retest): ``results.retest_of`` / ``transfer_ratio``,
their rules in the database, hashing of old rows, migration of a schema-1 store, merge and dry runs.
See docs/reference/store.md ("Migrations", ``retest_link``) and docs/guide/heldout.md."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

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
    raw_insert,
    raw_row,
)

import pytest_autotune.store.db as store_db
from pytest_autotune import cli
from pytest_autotune.errors import StoreError, ValidatorRefusal
from pytest_autotune.result import QuarantineRecord, Rejection, canonical_json
from pytest_autotune.store import (
    SCHEMA_VERSION,
    ResultStore,
    canonical_row,
    dry_run_insert,
    merge_databases,
    row_hash,
    row_mac,
    rule_of,
    schema,
)

ORIGIN_SPEEDUP = 2.0
HELDOUT_SPEEDUP = 1.5
RATIO = HELDOUT_SPEEDUP / ORIGIN_SPEEDUP
REPORT_REF = "report:cpu-2026-11-30.json#abc/benchmarks/kernels/level1/02_relu.py::relu[cpu]"


def _origin_store(path: Path) -> tuple[ResultStore, int]:
    """A store with a finished cpu run (candidates c0..c2 of problem p, c0 at 2.0x) and an open mlx run."""
    cpu, mlx = make_run("run-cpu"), make_run("run-mlx")
    store = new_store(path, cpu)
    ids = [
        store.record_result(make_result(cpu, i, measurement=make_measurement(ORIGIN_SPEEDUP)), nonce=nonce_for("run-cpu"))
        for i in range(3)
    ]
    store.finish_run("run-cpu", nonce_for("run-cpu"))
    store.begin_run(mlx)
    return store, ids[0]


def _heldout(run_id: str = "run-mlx", i: int = 0, **overrides) -> dict:
    """The results row of candidate c<i> measured on mlx (1.5x), without a link."""
    row = make_result(
        make_run(run_id), i, device="mlx", measurement=make_measurement(HELDOUT_SPEEDUP),
        nodeid=f"benchmarks/kernels/l1/p.py::c{i}[mlx]",
    ).as_row()
    row.update(overrides)
    return row


# ---------------------------------------------------------------------------------------------- schema


def test_schema_version_and_migrations():
    assert SCHEMA_VERSION == 6
    assert [m.name for m in schema.migrations._migrations] == ["0001_initial", "0002_retest", "0003_provenance",
                                                               "0004_engine", "0005_study", "0006_contract"]
    results = dict(schema.TABLES)["results"]
    v1 = dict(schema.TABLES_0001)["results"]
    assert "retest" not in v1 and "transfer_ratio" not in v1  # migration 0001 is what schema 1 was
    for name in ("retest_ref", "retest_pair", "transfer_ratio_positive"):
        assert f"CONSTRAINT {name} CHECK" in results and name in schema.CHECK_NAMES
    assert schema.TRIGGER_RULES["results_retest_link"] == "retest_link"
    assert [c for c, _, _ in schema.COLUMNS["results"]][-4:-2] == ["retest_of", "transfer_ratio"]


def test_new_and_migrated_store_store_exactly_the_expected_sql(tmp_path):
    """SQLite splices ADD COLUMN definitions into the stored CREATE TABLE text; the expected text is read from the migrated in-memory template (store/template.py)."""
    store = ResultStore.open(tmp_path / "new.db")
    actual = {
        (r[0], r[1]): r[2]
        for r in store._conn.execute("SELECT type, name, sql FROM sqlite_master WHERE type IN ('table', 'trigger')")
    }
    store.close()
    for key, sql in schema.EXPECTED_SCHEMA.items():
        assert actual.get(key) == sql, key
    cols = [r[1] for r in sqlite3.connect(tmp_path / "new.db").execute("PRAGMA table_info(results)")]
    assert cols[-6:] == ["prev_hash", "row_hash", "retest_of", "transfer_ratio", "remeasure_of", "contract"]


# ---------------------------------------------------------------------------------------------- rules (raw SQL)


def _raw_conn(tmp_path: Path) -> tuple[sqlite3.Connection, int]:
    store, origin_id = _origin_store(tmp_path / "r.db")
    store.close()
    return sqlite3.connect(tmp_path / "r.db"), origin_id


REFUSED = [
    # (retest_of, transfer_ratio, other overrides, rule)
    ("report:x.json#r/n", None, {}, "retest_pair"),
    (None, 0.75, {}, "retest_pair"),
    ("results:1", None, {}, "retest_pair"),
    (REPORT_REF, 0.0, {}, "transfer_ratio_positive"),
    (REPORT_REF, -0.75, {}, "transfer_ratio_positive"),
    (REPORT_REF, float("inf"), {}, "transfer_ratio_positive"),
    ("report:", 0.75, {}, "retest_ref"),
    ("report:   ", 0.75, {}, "retest_ref"),
    ("", 0.75, {}, "retest_ref"),
    ("result:1", 0.75, {}, "retest_ref"),
    ("run-cpu/c0", 0.75, {}, "retest_ref"),
    ("results:99", RATIO, {}, "retest_link"),  # no such row
    ("results:01", RATIO, {}, "retest_link"),  # not the row's exact reference
    ("results:1x", RATIO, {}, "retest_link"),
    ("results:0", RATIO, {}, "retest_link"),
    ("results:1", RATIO * 1.01, {}, "retest_link"),  # wrong ratio
    ("results:1", 1 / RATIO, {}, "retest_link"),  # inverted ratio
    ("results:1", RATIO * (1 + 1e-7), {}, "retest_link"),  # beyond 1e-9 relative
    ("results:1", RATIO, {"device": "cpu"}, "retest_link"),  # same device as the origin
    ("results:1", RATIO, {"problem": "q"}, "retest_link"),  # another problem
    ("results:2", RATIO, {}, "retest_link"),  # row 2 is candidate c1, this is c0
    ("results:1", "three quarters", {}, "datatype"),
    ("results:1", RATIO, {"candidate": "c1"}, "retest_link"),
]


@pytest.mark.parametrize("retest_of, ratio, overrides, rule", REFUSED)
def test_raw_sql_insert_is_refused_by_rule_name(tmp_path, retest_of, ratio, overrides, rule):
    """A plain sqlite3 connection, no plugin in the insert path: the database's own validator names the rule."""
    conn, origin_id = _raw_conn(tmp_path)
    assert origin_id == 1
    content = _heldout(**overrides, retest_of=retest_of, transfer_ratio=ratio)
    row = raw_row(conn, "results", content, nonce_for("run-mlx"))
    with pytest.raises(sqlite3.IntegrityError) as info:
        raw_insert(conn, "results", row)
    assert rule_of(str(info.value)) == rule, str(info.value)
    if rule == "retest_link":
        assert str(info.value).startswith("retest_link: retest_of = results:ID must name an existing results row")
    conn.rollback()
    assert conn.execute("SELECT count(*) FROM results WHERE device = 'mlx'").fetchone()[0] == 0
    conn.close()


@pytest.mark.parametrize("retest_of, ratio", [
    ("results:1", RATIO),
    ("results:1", RATIO * (1 + 5e-10)),  # within 1e-9 relative
    (REPORT_REF, 0.75),  # a report reference: form only
    (None, None),  # no link at all (every row of other devices)
])
def test_valid_linked_row_is_accepted_by_raw_sql_and_verifies(tmp_path, retest_of, ratio):
    conn, _ = _raw_conn(tmp_path)
    content = _heldout(retest_of=retest_of, transfer_ratio=ratio)
    raw_insert(conn, "results", raw_row(conn, "results", content, nonce_for("run-mlx")))
    conn.commit()
    got = conn.execute("SELECT retest_of, transfer_ratio FROM results WHERE device = 'mlx'").fetchall()
    assert got == [(retest_of, ratio)]
    conn.close()
    store = ResultStore.open(tmp_path / "r.db")
    store.finish_run("run-mlx", nonce_for("run-mlx"))
    report = store.verify()
    assert report.ok, report.render()
    store.close()


def test_linked_row_through_the_store_and_the_link_is_hashed(tmp_path):
    store, origin_id = _origin_store(tmp_path / "r.db")
    row = _heldout(retest_of=f"results:{origin_id}", transfer_ratio=RATIO)
    rid = store.insert_row("results", row, nonce=nonce_for("run-mlx"))
    stored = dict(store._conn.execute("SELECT * FROM results WHERE id = ?", [rid]).fetchone())
    assert stored["retest_of"] == "results:1" and stored["transfer_ratio"] == RATIO
    canonical = json.loads(canonical_row("results", stored))
    assert canonical["retest_of"] == "results:1" and canonical["transfer_ratio"] == RATIO
    assert stored["row_mac"] == row_mac(nonce_for("run-mlx"), canonical_row("results", stored))
    # a bad link through the store is a ValidatorRefusal naming the rule
    with pytest.raises(ValidatorRefusal) as info:
        store.insert_row("results", _heldout(i=1, retest_of="results:1", transfer_ratio=RATIO), nonce=nonce_for("run-mlx"))
    assert info.value.rule == "retest_link"
    with pytest.raises(ValidatorRefusal) as info:
        store.insert_row("results", _heldout(i=1, retest_of="results:2"), nonce=nonce_for("run-mlx"))
    assert info.value.rule == "retest_pair"
    store.finish_run("run-mlx", nonce_for("run-mlx"))
    assert store.verify().ok
    store.close()
    # editing the link (triggers dropped around the update) is evident: the row hash and MAC covered it
    conn = sqlite3.connect(tmp_path / "r.db")
    drop_and_recreate(conn, ["results_append_only_update"],
                      "UPDATE results SET retest_of = ?, transfer_ratio = ? WHERE id = ?", [REPORT_REF, 0.9, rid])
    conn.close()
    with ResultStore.open(tmp_path / "r.db", readonly=True) as s:
        problems = s.verify().problems
    assert f"results row {rid} was edited (row_hash mismatch)" in problems
    assert any(f"results row {rid} has a bad row_mac" in p for p in problems)


def test_null_new_columns_hash_exactly_like_schema_1_rows():
    """Old rows (no retest columns) must keep their hashes: NULL new columns are left out of the canonical row."""
    row = make_result(make_run(), 0).as_row()
    row["created_at"] = "2025-01-01T00:00:01.000000+00:00"
    row["row_mac"] = "0" * 64
    v1_columns = [c for c, _, _ in schema.COLUMNS["results"] if c not in schema.ADDED_COLUMNS["results"]]
    v1_canonical = canonical_json({c: row.get(c) for c in v1_columns if c not in schema.HASH_EXCLUDED["results"]})
    assert canonical_row("results", row) == v1_canonical
    assert canonical_row("results", {**row, "retest_of": None, "transfer_ratio": None}) == v1_canonical
    linked = canonical_row("results", {**row, "retest_of": "results:1", "transfer_ratio": 0.5})
    assert linked != v1_canonical and '"retest_of":"results:1"' in linked and '"transfer_ratio":0.5' in linked


# ---------------------------------------------------------------------------------------------- migration


def _schema1_store(path: Path, monkeypatch) -> None:
    """A store written at schema 1: only migration 0001 applied (the stop_before of sqlite-utils' Migrations),
    and ResultStore told that 1 is current while it writes runs, results, quarantine, a release, rejections."""

    def apply_0001_only(conn):
        import sqlite_utils

        db = sqlite_utils.Database(conn, execute_plugins=False)
        if schema.migrations.pending(db):
            conn.execute("BEGIN IMMEDIATE")
            schema.migrations.apply(db, stop_before="0002_retest")
            conn.execute("COMMIT")

    with monkeypatch.context() as m:
        m.setattr(store_db, "_apply_migrations", apply_0001_only)
        m.setattr(store_db, "SCHEMA_VERSION", 1)
        r1, r2 = make_run("run-1"), make_run("run-2")
        store = new_store(path, r1)
        fill(store, r1, 3)
        q = make_result(r1, 9, measurement=make_measurement(20.0))
        qid = store.record_quarantine(QuarantineRecord(q, "20x, above the breaker"), nonce=nonce_for("run-1"))
        store.record_rejection(Rejection("run-1", "p.py::bad[cpu]", "p", "bad", "cpu", "correctness", "rejected", "no"))
        store.finish_run("run-1", nonce_for("run-1"))
        rel = store.release_quarantine(qid, "looked at it, genuine", "alice")
        store.begin_run(r2)
        fill(store, r2, 2, start=3)
        store.record_result(make_result(r2, 9, measurement=make_measurement(20.0), breaker=f"released:{rel}"),
                            nonce=nonce_for("run-2"))
        store.finish_run("run-2", nonce_for("run-2"))
        store.close()
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 1
    assert conn.execute("SELECT sql FROM sqlite_master WHERE name = 'results'").fetchone()[0] == dict(
        schema.TABLES_0001)["results"]
    assert conn.execute("SELECT count(*) FROM sqlite_master WHERE name = 'results_retest_link'").fetchone()[0] == 0
    conn.close()


def _dump(path: Path) -> dict:
    conn = sqlite3.connect(path)
    out = {t: conn.execute(f"SELECT * FROM {t} ORDER BY rowid").fetchall()
           for t in ("protocols", "runs", "results", "quarantine", "rejections", "quarantine_releases", "chain_state")}
    conn.close()
    return out


def test_schema_1_store_migrates_in_place_keeps_its_rows_and_verifies(tmp_path, monkeypatch):
    db = tmp_path / "old.db"
    _schema1_store(db, monkeypatch)
    before = _dump(db)
    # a read-only command does not migrate: it says what to do (exit 2), and leaves the file as it was
    assert cli.main(["verify", "--db", str(db)]) == 2
    assert _dump(db) == before
    # the first open for writing (what pytest --autotune does) migrates in place
    store = ResultStore.open(db)
    assert store._conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert [r[0] for r in store._conn.execute("SELECT name FROM _sqlite_migrations ORDER BY rowid")] == [
        m.name for m in schema.migrations._migrations]
    store.close()
    after = _dump(db)
    # columns added by later migrations read NULL on the old rows; chain_state gains the rows of later chains
    added = len(schema.ADDED_COLUMNS["results"])
    assert after["results"] == [tuple(r) + (None,) * added for r in before["results"]]
    added = len(schema.ADDED_COLUMNS.get("rejections", ()))
    assert after["rejections"] == [tuple(r) + (None,) * added for r in before["rejections"]]
    assert after["chain_state"][:len(before["chain_state"])] == before["chain_state"]
    added = len(schema.ADDED_COLUMNS.get("quarantine", ()))
    assert after["quarantine"] == [tuple(r) + (None,) * added for r in before["quarantine"]]
    for t in ("protocols", "runs", "quarantine_releases"):
        assert after[t] == before[t], t
    assert cli.main(["verify", "--db", str(db)]) == 0
    # the migrated store takes linked rows that retest its old rows, and still verifies
    store = ResultStore.open(db)
    store.begin_run(make_run("run-mlx"))
    store.insert_row("results", _heldout(retest_of="results:1", transfer_ratio=RATIO),
                     nonce=nonce_for("run-mlx"))
    store.finish_run("run-mlx", nonce_for("run-mlx"))
    store.close()
    assert cli.main(["verify", "--db", str(db)]) == 0


def test_store_of_the_new_schema_is_refused_by_an_older_pytest_autotune(tmp_path, monkeypatch):
    ResultStore.open(tmp_path / "r.db").close()
    monkeypatch.setattr(store_db, "SCHEMA_VERSION", SCHEMA_VERSION - 1)
    with pytest.raises(StoreError) as info:
        ResultStore.open(tmp_path / "r.db")
    assert f"written by a newer pytest-autotune (schema {SCHEMA_VERSION} > {SCHEMA_VERSION - 1})" in str(info.value)


# ---------------------------------------------------------------------------------------------- merge, replay


def _linked_source(path: Path) -> None:
    """cpu run (c0, c1, c2), then an mlx run retesting c0 (results:1) and c1 (a report link)."""
    store, origin_id = _origin_store(path)
    store.insert_row("results", _heldout(retest_of=f"results:{origin_id}", transfer_ratio=RATIO),
                     nonce=nonce_for("run-mlx"))
    store.insert_row("results", _heldout(i=1, retest_of=REPORT_REF, transfer_ratio=0.8), nonce=nonce_for("run-mlx"))
    store.finish_run("run-mlx", nonce_for("run-mlx"))
    store.close()


def _link_of(path: Path, run_id: str, candidate: str) -> tuple:
    conn = sqlite3.connect(path)
    row = conn.execute("SELECT retest_of, transfer_ratio FROM results WHERE run_id = ? AND candidate = ?",
                       [run_id, candidate]).fetchone()
    conn.close()
    return row


def test_merge_remaps_the_link_to_the_targets_id(tmp_path):
    """Decision (docs/reference/store.md, merge): results:<id> is rewritten to the id the origin got in the target (and
    the MAC recomputed with the revealed nonce); report: links are copied unchanged."""
    _linked_source(tmp_path / "a.db")
    target = tmp_path / "all.db"
    other = make_run("run-other")
    t = new_store(target, other)
    fill(t, other, 4)  # the target's ids 1..4 are taken: the source's row 1 becomes row 5
    t.finish_run("run-other", nonce_for("run-other"))
    t.close()
    rep = merge_databases([tmp_path / "a.db"], target)
    assert rep.ok, rep.render()
    conn = sqlite3.connect(target)
    origin_id = conn.execute("SELECT id FROM results WHERE run_id = 'run-cpu' AND candidate = 'c0'").fetchone()[0]
    conn.close()
    assert origin_id == 5
    assert _link_of(target, "run-mlx", "c0") == (f"results:{origin_id}", RATIO)
    assert _link_of(target, "run-mlx", "c1") == (REPORT_REF, 0.8)
    with ResultStore.open(target, readonly=True) as s:
        assert s.verify().ok
    # merging again inserts nothing; the link stays as it is
    again = merge_databases([tmp_path / "a.db"], target)
    assert again.inserted == 0 and again.refused == 0
    assert _link_of(target, "run-mlx", "c0") == (f"results:{origin_id}", RATIO)
    # the source is untouched and verifies (its replay re-maps into a fresh store too)
    assert _link_of(tmp_path / "a.db", "run-mlx", "c0") == ("results:1", RATIO)
    with ResultStore.open(tmp_path / "a.db", readonly=True) as s:
        assert s.verify().ok


def test_merge_finds_an_origin_merged_earlier(tmp_path):
    """The origin's run came into the target with an earlier merge (from a copy holding only it); the held-out
    run comes later from a store that has both: the origin run is skipped as a duplicate and the link is
    re-mapped to the row already in the target (found by run_id and nodeid)."""
    _linked_source(tmp_path / "a.db")
    only_cpu = tmp_path / "only_cpu.db"
    cpu = make_run("run-cpu")
    s = new_store(only_cpu, cpu)
    for i in range(3):
        s.record_result(make_result(cpu, i, measurement=make_measurement(ORIGIN_SPEEDUP)), nonce=nonce_for("run-cpu"))
    s.finish_run("run-cpu", nonce_for("run-cpu"))
    s.close()
    target = tmp_path / "all.db"
    pre = make_run("run-pre")
    t = new_store(target, pre)
    fill(t, pre, 2)
    t.finish_run("run-pre", nonce_for("run-pre"))
    t.close()
    assert merge_databases([only_cpu], target).ok
    rep = merge_databases([tmp_path / "a.db"], target)
    assert rep.ok, rep.render()
    assert rep.skipped == 1 and "run run-cpu is already in the target" in rep.render()
    conn = sqlite3.connect(target)
    origin_id = conn.execute("SELECT id FROM results WHERE run_id = 'run-cpu' AND candidate = 'c0'").fetchone()[0]
    conn.close()
    assert origin_id == 3
    assert _link_of(target, "run-mlx", "c0") == (f"results:{origin_id}", RATIO)


def test_merge_refuses_a_link_whose_origin_did_not_make_it(tmp_path):
    _linked_source(tmp_path / "a.db")
    conn = sqlite3.connect(tmp_path / "a.db")  # tamper with the origin row: it fails its MAC in the merge
    drop_and_recreate(conn, ["results_append_only_update"], "UPDATE results SET speedup = 2.01 WHERE id = 1")
    conn.close()
    rep = merge_databases([tmp_path / "a.db"], tmp_path / "all.db", force=True)
    assert not rep.ok
    text = rep.render()
    assert "results row 1 refused: row_mac does not match" in text
    assert "results row 4 refused: it retests results row 1 of the source (results:1), which is not in the target" in text
    assert _link_of(tmp_path / "all.db", "run-mlx", "c0") is None
    assert _link_of(tmp_path / "all.db", "run-mlx", "c1") == (REPORT_REF, 0.8)


def test_replay_catches_a_link_forged_past_the_trigger(tmp_path):
    """A linked row inserted while results_retest_link was dropped (wrong ratio, correct hash and MAC) is found
    by verify's replay."""
    store, _ = _origin_store(tmp_path / "r.db")
    store.close()
    conn = sqlite3.connect(tmp_path / "r.db")
    row = raw_row(conn, "results", _heldout(retest_of="results:1", transfer_ratio=0.9), nonce_for("run-mlx"))
    sql, params = insert_sql("results", row)
    drop_and_recreate(conn, ["results_retest_link"], sql, params)
    conn.close()
    with ResultStore.open(tmp_path / "r.db") as s:
        s.finish_run("run-mlx", nonce_for("run-mlx"))
        problems = s.verify().problems
    assert len(problems) == 1 and problems[0].startswith("replay: ") and "retest_link" in problems[0], problems


# ---------------------------------------------------------------------------------------------- dry run


def test_dry_run_insert_checks_a_link_against_a_stand_in_origin():
    run = make_run("run-mlx")
    dry_run_insert(run, PROTO, "results", _heldout(retest_of="results:7", transfer_ratio=RATIO),
                   nonce=nonce_for("run-mlx"))
    dry_run_insert(run, PROTO, "results", _heldout(retest_of=REPORT_REF, transfer_ratio=RATIO),
                   nonce=nonce_for("run-mlx"))
    for bad, rule in [({"retest_of": "results:7"}, "retest_pair"),
                      ({"retest_of": "report:", "transfer_ratio": 0.5}, "retest_ref"),
                      ({"retest_of": REPORT_REF, "transfer_ratio": -1.0}, "transfer_ratio_positive")]:
        with pytest.raises(ValidatorRefusal) as info:
            dry_run_insert(run, PROTO, "results", _heldout(**bad), nonce=nonce_for("run-mlx"))
        assert info.value.rule == rule


def test_linked_row_hash_matches_what_verify_recomputes(tmp_path):
    store, _ = _origin_store(tmp_path / "r.db")
    rid = store.insert_row("results", _heldout(retest_of="results:1", transfer_ratio=RATIO), nonce=nonce_for("run-mlx"))
    r = dict(store._conn.execute("SELECT * FROM results WHERE id = ?", [rid]).fetchone())
    assert r["row_hash"] == row_hash(r["prev_hash"], canonical_row("results", r))
    store.close()
