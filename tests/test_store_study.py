"""The store's study rules (migration 0005_study, docs/reference/store.md#studies-migration-0005_study): registrations before a study's first
row, verdicts that can only be non-exploratory under a registered and unchanged entry, the row-by-row re-measure
link, and how merge, verify and the migration of an older store carry them. Each rule is attacked with raw SQL,
the way a hostile writer would try it."""

from __future__ import annotations

import sqlite3

import pytest
from test_store_schema import (
    drop_and_recreate,
    fill,
    make_result,
    make_run,
    new_store,
    nonce_for,
    raw_insert,
    raw_row,
    sha,
)

from pytest_autotune import cli
from pytest_autotune.errors import ValidatorRefusal
from pytest_autotune.result import Rejection, canonical_json
from pytest_autotune.store import ResultStore, dry_run_insert, merge_databases, schema
from pytest_autotune.store.studies import record_registration, record_verdict, registration, remeasured_rows

ENTRY = {"hypothesis": "the treatment is faster than the control", "arms": ["a", "b"]}
ENTRY_SHA = sha(canonical_json(ENTRY))


def reg_row(run_id: str, study: str = "s1", status: str = "registered", **kw) -> dict:
    row = {"run_id": run_id, "study": study, "status": status, "registry": "studies.toml",
           "entry": canonical_json(ENTRY) if status != "unregistered" else None,
           "entry_sha256": ENTRY_SHA if status != "unregistered" else None,
           "git_commit": "a" * 40 if status == "registered" else None, "detail": "test registration"}
    row.update(kw)
    return row


def verdict_row(study: str = "s1", *, exploratory: int = 0, registration_id=1, entry_sha256=ENTRY_SHA,
                verdict: str = "supported", suspect: int = 0) -> dict:
    label = ("exploratory: " if exploratory else "") + verdict + (" [plumbing suspect]" if suspect else "")
    return {"study": study, "verdict": verdict, "label": label, "exploratory": exploratory,
            "plumbing_suspect": suspect, "registration_id": registration_id, "entry_sha256": entry_sha256,
            "report": "{}"}


def study_store(tmp_path, status: str = "registered") -> ResultStore:
    run = make_run("run-A")
    store = new_store(tmp_path / "r.db", run)
    record_registration(store, reg_row("run-A", status=status), nonce=nonce_for("run-A"))
    store.record_result(make_result(run, 0, study="s1", arm="a", iteration=1), nonce=nonce_for("run-A"))
    return store


# ---------------------------------------------------------------------------------------------- registration


def test_a_study_row_needs_its_registration_first(tmp_path):
    run = make_run("run-A")
    store = new_store(tmp_path / "r.db", run)
    with pytest.raises(ValidatorRefusal) as info:
        store.record_result(make_result(run, 0, study="s1", arm="a", iteration=1), nonce=nonce_for("run-A"))
    assert info.value.rule == "study_registered_first"
    rej = {**Rejection("run-A", "p.py::x[cpu]", "p", "x", "cpu", "correctness", "rejected", "no").as_row(),
           "study": "s1", "arm": "a", "iteration": 2, "candidate_sha256": sha("x")}
    with pytest.raises(ValidatorRefusal) as info:
        store.insert_row("rejections", rej, nonce=None)
    assert info.value.rule == "study_registered_first"
    record_registration(store, reg_row("run-A"), nonce=nonce_for("run-A"))
    store.record_result(make_result(run, 0, study="s1", arm="a", iteration=1), nonce=nonce_for("run-A"))
    store.insert_row("rejections", rej, nonce=None)
    # one registration per study: the first row decided it
    with pytest.raises(ValidatorRefusal) as info:
        record_registration(store, reg_row("run-A", status="unregistered"), nonce=nonce_for("run-A"))
    assert info.value.rule == "unique"
    store.finish_run("run-A", nonce_for("run-A"))
    assert store.verify().ok, store.verify().problems
    store.close()


@pytest.mark.parametrize("overrides, rule", [
    ({"status": "maybe"}, "registration_status"),
    ({"status": "registered", "git_commit": None}, "registration_entry"),
    ({"status": "registered", "git_commit": "xyz"}, "registration_entry"),
    # an unregistered study has no entry
    ({"status": "unregistered", "entry": canonical_json(ENTRY), "entry_sha256": ENTRY_SHA}, "registration_entry"),
    ({"entry": "[1]"}, "registration_entry"),
    ({"study": "bad name!"}, "registration_names"),
    ({"detail": "  "}, "registration_names"),
])
def test_registration_rules(tmp_path, overrides, rule):
    store = new_store(tmp_path / "r.db", make_run("run-A"))
    with pytest.raises(ValidatorRefusal) as info:
        record_registration(store, reg_row("run-A", **overrides), nonce=nonce_for("run-A"))
    assert info.value.rule == rule
    store.close()


@pytest.mark.parametrize("fields, rule", [
    ({"study": "s1", "arm": None, "iteration": 1}, "study_fields"),
    ({"study": None, "arm": "a", "iteration": None}, "study_fields"),
    ({"study": None, "arm": None, "iteration": 3}, "study_fields"),
    ({"study": "s1", "arm": "a b", "iteration": 1}, "study_fields"),
    ({"study": "s1", "arm": "a", "iteration": -1}, "iteration"),
])
def test_study_fields_rule(tmp_path, fields, rule):
    store = study_store(tmp_path)
    run = make_run("run-A")
    with pytest.raises(ValidatorRefusal) as info:
        store.record_result(make_result(run, 5, **fields), nonce=nonce_for("run-A"))
    assert info.value.rule in (rule, "study_fields")
    store.close()


def test_a_registration_forged_during_the_run_is_caught_at_finish(tmp_path):
    """A candidate that could write the database inserts a 'registered' row for a study it was not registered in:
    it cannot MAC it with the run's secret nonce."""
    store = new_store(tmp_path / "r.db", make_run("run-A"))
    store.close()
    conn = sqlite3.connect(tmp_path / "r.db")
    raw_insert(conn, "study_registrations", raw_row(conn, "study_registrations", reg_row("run-A"),
                                                    nonce=b"not the nonce" * 3))
    conn.commit()
    conn.close()
    store = ResultStore.open(tmp_path / "r.db")
    with pytest.raises(Exception) as info:
        store.finish_run("run-A", nonce_for("run-A"))
    assert "study_registrations row 1" in str(info.value)
    store.close()


# ---------------------------------------------------------------------------------------------- verdicts


def test_a_verdict_is_exploratory_unless_registered_and_unchanged(tmp_path):
    store = study_store(tmp_path)
    record_verdict(store, verdict_row())  # registered, same entry: may be non-exploratory
    for row in (verdict_row(entry_sha256=sha("edited entry")),  # judged under an edited entry
                verdict_row(registration_id=None),  # no registration named
                verdict_row(entry_sha256=None)):
        with pytest.raises(ValidatorRefusal) as info:
            record_verdict(store, row)
        assert info.value.rule == "verdict_exploratory"
    record_verdict(store, verdict_row(exploratory=1, entry_sha256=sha("edited entry")))
    with pytest.raises(ValidatorRefusal) as info:
        record_verdict(store, verdict_row(registration_id=99))
    assert info.value.rule == "verdict_registration"
    store.close()


def test_a_study_registered_after_its_first_result_can_only_read_exploratory(tmp_path):
    store = study_store(tmp_path, status="uncommitted")
    with pytest.raises(ValidatorRefusal) as info:
        record_verdict(store, verdict_row())
    assert info.value.rule == "verdict_exploratory"
    record_verdict(store, verdict_row(exploratory=1))
    store.close()


@pytest.mark.parametrize("overrides, rule", [
    ({"label": "supported"}, "verdict_label"),  # exploratory without its prefix
    ({"verdict": "no difference", "label": "exploratory: no difference"}, "verdict_kind"),
    ({"exploratory": 2}, "verdict_flags"),
    ({"report": "[]"}, "verdict_report"),
])
def test_verdict_checks(tmp_path, overrides, rule):
    store = study_store(tmp_path)
    row = {**verdict_row(exploratory=1), **overrides}
    with pytest.raises(ValidatorRefusal) as info:
        record_verdict(store, row)
    assert info.value.rule == rule
    store.close()


def test_raw_sql_cannot_flip_a_verdict_to_confirmatory(tmp_path):
    """Insert a non-exploratory verdict for an unregistered study with raw SQL, then flip a stored one: the trigger
    refuses the first, append-only refuses the second, and a drop-and-recreate is caught by verify's replay."""
    store = study_store(tmp_path, status="unregistered")
    record_verdict(store, verdict_row(exploratory=1, entry_sha256=None))
    store.finish_run("run-A", nonce_for("run-A"))
    store.close()
    conn = sqlite3.connect(tmp_path / "r.db")
    with pytest.raises(sqlite3.IntegrityError, match="verdict_exploratory"):
        raw_insert(conn, "study_verdicts", raw_row(conn, "study_verdicts", verdict_row(entry_sha256=None), None))
    with pytest.raises(sqlite3.IntegrityError, match="study_verdicts_append_only"):
        conn.execute("UPDATE study_verdicts SET exploratory = 0, label = verdict")
    conn.rollback()
    drop_and_recreate(conn, ["study_verdicts_exploratory"], "INSERT INTO study_verdicts "
                      "(study, verdict, label, exploratory, plumbing_suspect, registration_id, entry_sha256, report, "
                      "created_at, prev_hash, row_hash) VALUES (?, ?, ?, 0, 0, 1, NULL, '{}', ?, ?, ?)",
                      _chained_verdict(conn))
    conn.close()
    with ResultStore.open(tmp_path / "r.db", readonly=True) as s:
        problems = s.verify().problems
    assert any("study_verdicts row 2 is refused by the validator when replayed: verdict_exploratory" in p
               for p in problems), problems


def _chained_verdict(conn: sqlite3.Connection) -> list:
    row = raw_row(conn, "study_verdicts", {**verdict_row(entry_sha256=None), "report": "{}"}, None)
    return [row["study"], row["verdict"], row["label"], row["created_at"], row["prev_hash"], row["row_hash"]]


# ---------------------------------------------------------------------------------------------- re-measure link


def test_remeasure_link_rules(tmp_path):
    a, b = make_run("run-A"), make_run("run-B")
    store = new_store(tmp_path / "r.db", a)
    (rid,) = fill(store, a, 1)
    store.begin_run(b)
    nb = nonce_for("run-B")
    ok = {**make_result(b, 0).as_row(), "remeasure_of": f"results:{rid}"}
    refused = [
        ({**make_result(a, 1).as_row(), "remeasure_of": f"results:{rid}", "run_id": "run-A"}, "remeasure_link"),
        ({**make_result(b, 1).as_row(), "remeasure_of": f"results:{rid}"}, "remeasure_link"),  # other candidate
        ({**ok, "device": "cuda"}, "remeasure_link"),
        ({**ok, "remeasure_of": "results:99"}, "remeasure_link"),
        ({**ok, "remeasure_of": "results:01"}, "remeasure_ref"),
        ({**ok, "remeasure_of": "run-A/1"}, "remeasure_ref"),
    ]
    for row, rule in refused:
        nonce = nonce_for(row["run_id"])
        with pytest.raises(ValidatorRefusal) as info:
            store.insert_row("results", row, nonce=nonce)
        assert info.value.rule == rule, (row, info.value)
    store.insert_row("results", ok, nonce=nb)
    with pytest.raises(ValidatorRefusal) as info:  # once per run
        store.insert_row("results", {**ok, "nodeid": ok["nodeid"] + "#2"}, nonce=nb)
    assert info.value.rule == "remeasure_once"
    store.finish_run("run-B", nb)
    pairs = remeasured_rows(store, "run-B")
    assert [(p["orig_id"], p["orig_run_id"]) for p in pairs] == [(rid, "run-A")]
    assert store.verify().ok
    store.close()


# ---------------------------------------------------------------------------------------------- merge, dry run


def _one_study_store(path, run_id: str, status: str = "registered", remeasure_first: bool = False) -> None:
    run = make_run(run_id)
    store = new_store(path, run)
    record_registration(store, reg_row(run_id, status=status), nonce=nonce_for(run_id))
    store.record_result(make_result(run, 0, study="s1", arm=run_id, iteration=1,
                                    nodeid=f"p.py::c0[{run_id}]"), nonce=nonce_for(run_id))
    store.finish_run(run_id, nonce_for(run_id))
    store.close()


def test_merge_keeps_one_registration_per_study_and_refuses_a_disagreeing_one(tmp_path):
    _one_study_store(tmp_path / "a.db", "run-A")
    _one_study_store(tmp_path / "b.db", "run-B")  # same study, same finding (two hosts ran two arms)
    _one_study_store(tmp_path / "c.db", "run-C", status="uncommitted")
    rep = merge_databases([tmp_path / "a.db", tmp_path / "b.db"], tmp_path / "all.db")
    assert rep.ok, rep.render()
    assert rep.by_table.get("study_registrations") == 1 and rep.by_table.get("results") == 2
    rep = merge_databases([tmp_path / "c.db"], tmp_path / "all.db")
    assert not rep.ok and any("disagree on what was pre-registered" in m for m in rep.messages)
    with ResultStore.open(tmp_path / "all.db", readonly=True) as s:
        assert registration(s, "s1")["status"] == "registered"
        assert s.verify().ok


def test_merge_remaps_remeasure_links_and_verdicts(tmp_path):
    a, b = make_run("run-A"), make_run("run-B")
    store = new_store(tmp_path / "src.db", a)
    record_registration(store, reg_row("run-A"), nonce=nonce_for("run-A"))
    fill(store, a, 2)
    rid = store.record_result(make_result(a, 5, study="s1", arm="a", iteration=1), nonce=nonce_for("run-A"))
    store.finish_run("run-A", nonce_for("run-A"))
    store.begin_run(b)
    store.insert_row("results", {**make_result(b, 5).as_row(), "remeasure_of": f"results:{rid}"},
                     nonce=nonce_for("run-B"))
    store.finish_run("run-B", nonce_for("run-B"))
    record_verdict(store, verdict_row())
    store.close()
    # a target that already holds other rows: every id moves
    other = make_run("run-X")
    t = new_store(tmp_path / "t.db", other)
    fill(t, other, 3, start=10)
    t.finish_run("run-X", nonce_for("run-X"))
    t.close()
    rep = merge_databases([tmp_path / "src.db"], tmp_path / "t.db")
    assert rep.ok, rep.render()
    with ResultStore.open(tmp_path / "t.db", readonly=True) as s:
        (pair,) = remeasured_rows(s, "run-B")
        assert pair["orig_run_id"] == "run-A" and pair["orig_id"] == rid + 3
        v = s._conn.execute("SELECT registration_id, exploratory FROM study_verdicts").fetchone()
        assert tuple(v) == (registration(s, "s1")["id"], 0)
        assert s.verify().ok


def test_dry_run_of_a_study_row_uses_a_stand_in_registration(tmp_path):
    from test_store_schema import PROTO

    run = make_run("run-A")
    dry_run_insert(run, PROTO, "results", make_result(run, 0, study="s1", arm="a", iteration=3).as_row(),
                   nonce=nonce_for("run-A"))
    with pytest.raises(ValidatorRefusal) as info:
        dry_run_insert(run, PROTO, "results", make_result(run, 0, study="s1", arm=None, iteration=3).as_row(),
                       nonce=nonce_for("run-A"))
    assert info.value.rule == "study_fields"


# ---------------------------------------------------------------------------------------------- migration


def test_a_schema_3_store_migrates_to_studies_and_keeps_verifying(tmp_path, monkeypatch):
    import sqlite_utils

    import pytest_autotune.store.db as store_db

    def apply_up_to_0003(conn):
        db = sqlite_utils.Database(conn, execute_plugins=False)
        if schema.migrations.pending(db):
            conn.execute("BEGIN IMMEDIATE")
            schema.migrations.apply(db, stop_before="0004_engine")
            conn.execute("COMMIT")

    monkeypatch.setattr(store_db, "_apply_migrations", apply_up_to_0003)
    monkeypatch.setattr(store_db, "SCHEMA_VERSION", 3)
    run = make_run("run-A")
    store = new_store(tmp_path / "old.db", run)
    fill(store, run, 2)
    store.record_rejection(Rejection("run-A", "p.py::bad[cpu]", "p", "bad", "cpu", "correctness", "rejected", "no"))
    store.finish_run("run-A", nonce_for("run-A"))
    store.close()
    monkeypatch.undo()
    assert sqlite3.connect(tmp_path / "old.db").execute("PRAGMA user_version").fetchone()[0] == 3
    assert cli.main(["verify", "--db", str(tmp_path / "old.db")]) == 2  # read-only: asks to migrate
    store = ResultStore.open(tmp_path / "old.db")  # migrates in place
    assert store.verify().ok, store.verify().problems
    epochs = dict(store._conn.execute("SELECT tbl, first_id FROM rule_epochs WHERE migration = '0005_study'"))
    assert epochs == {"results": 3, "quarantine": 1, "rejections": 2}
    # the migrated store takes study rows and verdicts
    b = make_run("run-B")
    store.begin_run(b)
    record_registration(store, reg_row("run-B"), nonce=nonce_for("run-B"))
    store.record_result(make_result(b, 0, study="s1", arm="a", iteration=1), nonce=nonce_for("run-B"))
    store.insert_row("results", {**make_result(b, 1).as_row(), "remeasure_of": "results:2"}, nonce=nonce_for("run-B"))
    store.finish_run("run-B", nonce_for("run-B"))
    record_verdict(store, verdict_row())
    store.close()
    assert cli.main(["verify", "--db", str(tmp_path / "old.db")]) == 0
