"""Engine rows in the store (migration 0004_engine, docs/reference/store.md, docs/guide/engines.md): the database itself refuses
an engine result whose arms are different engines or that lacks paired seeds — with raw SQL, as a candidate with
file access would try."""

from __future__ import annotations

import json
import sqlite3

import pytest
from test_store_schema import (
    make_engine_result,
    make_result,
    make_run,
    new_store,
    nonce_for,
    raw_insert,
    raw_row,
)

from pytest_autotune.errors import ValidatorRefusal
from pytest_autotune.store import ResultStore, schema

engine_result = make_engine_result


def _raw(tmp_path, result_row: dict, table: str = "results") -> None:
    run = make_run()
    store = new_store(tmp_path / "r.db", run)
    store.close()
    conn = sqlite3.connect(tmp_path / "r.db")
    try:
        if table == "quarantine":
            result_row = {**result_row, "reason": "breaker tripped"}
        raw_insert(conn, table, raw_row(conn, table, result_row, nonce_for(run.run_id)))
        conn.commit()
    finally:
        conn.close()


def test_engine_result_without_paired_seeds_cannot_enter_db(tmp_path):
    """docs/reference/store.md's named regression test: an engine row with no paired seeds is refused by the database, whatever
    the path: no seeds at all, or seeds that the arms did not share."""
    run = make_run()
    # 1. no seeds at all (row and provenance agree on an empty list)
    row = engine_result(run, seeds=[], arm_seeds=([], [])).as_row()
    with pytest.raises(sqlite3.IntegrityError, match=r"^paired_seeds: "):
        _raw(tmp_path / "a", row)
    # 2. seeds on the row, but the arms' seeds are absent: nothing says both arms were driven by them
    row = engine_result(run).as_row()
    prov = json.loads(row["provenance"])
    for arm in prov["arms"].values():
        del arm["seeds"]
    row["provenance"] = json.dumps(prov, sort_keys=True, separators=(",", ":"))
    with pytest.raises(sqlite3.IntegrityError, match=r"^engine_paired_seeds: "):
        _raw(tmp_path / "b", row)
    # 3. the arms were driven by different seeds (unpaired: the default got other prompts)
    seeds = list(range(900, 906))
    other = list(range(700, 706))
    row = engine_result(run, seeds=seeds, arm_seeds=(other, seeds)).as_row()
    with pytest.raises(sqlite3.IntegrityError, match=r"^engine_paired_seeds: "):
        _raw(tmp_path / "c", row)
    # 4. the same, into quarantine
    with pytest.raises(sqlite3.IntegrityError, match=r"^engine_paired_seeds: "):
        _raw(tmp_path / "d", row, table="quarantine")


def test_engine_row_with_arms_of_two_engines_cannot_enter_db(tmp_path):
    run = make_run()
    row = engine_result(run, engines=("vllm", "llamacpp")).as_row()
    with pytest.raises(sqlite3.IntegrityError, match=r"^engine_arms: "):
        _raw(tmp_path / "a", row)
    # an engine row whose problem names another engine than its arms
    row = engine_result(run, problem="sglang:short").as_row()
    with pytest.raises(sqlite3.IntegrityError, match=r"^engine_arms: "):
        _raw(tmp_path / "b", row)
    # no arms at all
    row = engine_result(run).as_row()
    prov = json.loads(row["provenance"])
    del prov["arms"]
    row["provenance"] = json.dumps(prov, sort_keys=True, separators=(",", ":"))
    with pytest.raises(sqlite3.IntegrityError, match=r"^engine_arms: "):
        _raw(tmp_path / "c", row)
    with pytest.raises(sqlite3.IntegrityError, match=r"^engine_arms: "):
        _raw(tmp_path / "d", engine_result(run, engines=("vllm", "")).as_row(), table="quarantine")


def test_valid_engine_rows_enter_through_the_store_and_verify(tmp_path):
    run = make_run()
    store = new_store(tmp_path / "r.db", run)
    ids = [store.record_result(engine_result(run, i), nonce=nonce_for(run.run_id)) for i in range(3)]
    store.record_result(make_result(run, 9), nonce=nonce_for(run.run_id))  # a kernel row is not concerned
    with pytest.raises(ValidatorRefusal) as e:
        store.record_result(engine_result(run, 5, engines=("vllm", "sglang")), nonce=nonce_for(run.run_id))
    assert e.value.rule == "engine_arms"
    store.finish_run(run.run_id, nonce_for(run.run_id))
    rep = store.verify()
    assert rep.ok, rep.problems
    kinds = [r["kind"] for r in store.results()]
    assert kinds.count("engine") == 3 and len(ids) == 3
    store.close()


def test_migration_0004_is_declared_and_epoch_recorded(tmp_path):
    names = [m.name for m in schema.migrations._migrations]
    assert names.index("0004_engine") == names.index("0003_provenance") + 1
    assert schema.TRIGGER_RULES["results_engine_paired_seeds"] == "engine_paired_seeds"
    assert schema.TRIGGER_RULES["quarantine_engine_arms"] == "engine_arms"
    store = ResultStore.open(tmp_path / "r.db")
    epochs = {(m, t) for m, t, _ in store._conn.execute("SELECT migration, tbl, first_id FROM rule_epochs")}
    assert {("0004_engine", "results"), ("0004_engine", "quarantine")} <= epochs
    store.close()
