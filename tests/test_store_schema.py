"""The results store's schema and its in-database validator (docs/reference/store.md).

The builders at the top (``PROTO``, ``make_run``, ``make_result``, ``new_store``, ``raw_row``...) are imported by
the other tests/test_store_*.py files.
"""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
from pathlib import Path

import pytest

from pytest_autotune.errors import StoreError, ValidatorRefusal
from pytest_autotune.protocol import load_protocol, parse_protocol
from pytest_autotune.result import KernelResult, Measurement, QuarantineRecord, Rejection, RunRecord
from pytest_autotune.store import (
    SCHEMA_VERSION,
    ResultStore,
    canonical_row,
    dry_run_insert,
    nonce_commitment,
    row_hash,
    row_mac,
    rule_of,
    schema,
)

REPO = Path(__file__).resolve().parents[1]
PROTO = load_protocol(REPO / "protocol.toml")
#: a second, different protocol (same keys, another name): a digest that is not the run's
PROTO2 = parse_protocol(PROTO.text.replace('name = "pytest-autotune default"', 'name = "other"').encode(), "p2.toml")
N_SEEDS = PROTO.seeds.count
MIN_PAIRS = PROTO.timing.min_pairs
MAX_SPEEDUP = PROTO.breaker.max_speedup


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def nonce_for(run_id: str) -> bytes:
    return hashlib.sha256(f"nonce|{run_id}".encode()).digest()


def make_run(run_id: str = "run-A", *, exploratory: bool = False, frozen: bool = True, proto=PROTO) -> RunRecord:
    return RunRecord(
        run_id=run_id,
        started_at="2025-01-01T00:00:00+00:00",
        protocol_version=proto.version,
        protocol_sha256=proto.sha256,
        protocol_frozen=frozen,
        exploratory=exploratory,
        git_sha="0" * 40,
        git_dirty=False,
        harness_version="0.1.0",
        harness_sha256=sha("harness"),
        host="testhost",
        device="cpu",
        device_fingerprint={"cpu": "test"},
        python_version="3.11",
        torch_version=None,
        numpy_version=None,
        mlx_version=None,
        nonce_sha256=nonce_commitment(nonce_for(run_id)),
        argv=("pytest", "--autotune"),
        provenance={"test": True},
    )


def make_measurement(speedup: float = 2.0, n_pairs: int = MIN_PAIRS + 4) -> Measurement:
    return Measurement(
        n_pairs=n_pairs,
        candidate_s=1e-3,
        baseline_s=1e-3 * speedup,
        speedup=speedup,
        ci_low=speedup * 0.95,
        ci_high=speedup * 1.05,
        ci_target_met=True,
        strawman_speedup=speedup,
    )


def make_result(run: RunRecord, i: int = 0, **overrides) -> KernelResult:
    fields = {
        "run_id": run.run_id,
        "kind": "kernel",
        "nodeid": f"benchmarks/kernels/l1/p.py::p[c{i}-cpu]",
        "problem": "p",
        "problem_sha256": sha("problem"),
        "candidate": f"c{i}",
        "candidate_sha256": sha(f"candidate{i}"),
        "baseline": "reference",
        "baseline_sha256": sha("problem"),
        "device": "cpu",
        "seeds": tuple(range(100 + i * 10, 100 + i * 10 + N_SEEDS)),
        "measurement": make_measurement(),
        "correctness": "passed",
        "probes": {"status": "passed", "examples": 12, "seed": 1},
        "integrity": "passed",
        "breaker": "ok",
        "protocol_sha256": run.protocol_sha256,
        "exploratory": run.exploratory,
    }
    fields.update(overrides)
    if "provenance" not in overrides:  # what the session records: the row's own digests, seeds and sizes
        fields["provenance"] = {"problem_sha256": fields["problem_sha256"],
                                "candidate_sha256": fields["candidate_sha256"],
                                "baseline_sha256": fields["baseline_sha256"], "seeds": list(fields["seeds"]),
                                "sizes": {}, "i": i}
    return KernelResult(**fields)


def make_engine_result(run: RunRecord, i: int = 0, *, seeds=None, arm_seeds=None, engines=("vllm", "vllm"),
                       problem: str = "vllm:short", **overrides) -> KernelResult:
    """An engine row as the engine items record it (docs/guide/engines.md): both arms' engine and seeds in provenance."""
    seeds = tuple(range(500 + i * 10, 500 + i * 10 + max(N_SEEDS, 6))) if seeds is None else tuple(seeds)
    a_seeds, b_seeds = (list(seeds), list(seeds)) if arm_seeds is None else arm_seeds
    prov = {
        "problem_sha256": sha("workload"), "candidate_sha256": sha(f"config{i}"), "baseline_sha256": sha("default"),
        "seeds": list(seeds), "sizes": {"requests": 64, "concurrency": 16},
        "arms": {"baseline": {"engine": engines[0], "config": "default", "seeds": a_seeds},
                 "candidate": {"engine": engines[1], "config": f"cfg{i}", "seeds": b_seeds}},
    }
    fields = dict(kind="engine", nodeid=f"benchmarks/engines/vllm.toml::cfg{i}[short]", problem=problem,
                  problem_sha256=sha("workload"), candidate=f"cfg{i}", candidate_sha256=sha(f"config{i}"),
                  baseline="default", baseline_sha256=sha("default"), seeds=seeds,
                  probes={"status": "disabled"}, provenance=prov)
    fields.update(overrides)
    return make_result(run, i, **fields)


def new_store(path: Path, *runs: RunRecord) -> ResultStore:
    store = ResultStore.open(path)
    store.register_protocol(PROTO, frozen=True)
    for run in runs:
        store.begin_run(run)
    return store


def fill(store: ResultStore, run: RunRecord, n: int, start: int = 0) -> list[int]:
    return [store.record_result(make_result(run, i), nonce=nonce_for(run.run_id)) for i in range(start, start + n)]


def head(conn: sqlite3.Connection, table: str) -> str:
    return conn.execute("SELECT head FROM chain_state WHERE tbl = ?", [table]).fetchone()[0]


def raw_row(conn: sqlite3.Connection, table: str, content: dict, nonce: bytes | None) -> dict:
    """A complete row for a raw INSERT: content + created_at + correct prev_hash/row_hash (+ row_mac)."""
    row = dict(content)
    if "created_at" in schema.COLUMN_TYPES[table]:
        row.setdefault("created_at", "2025-01-01T00:00:01.000000+00:00")
    canonical = canonical_row(table, row)
    if nonce is not None:
        row["row_mac"] = row_mac(nonce, canonical)
    row["prev_hash"] = head(conn, table)
    row["row_hash"] = row_hash(row["prev_hash"], canonical)
    return row


def insert_sql(table: str, row: dict) -> tuple[str, list]:
    cols = list(row)
    return f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join('?' for _ in cols)})", [row[c] for c in cols]


def raw_insert(conn: sqlite3.Connection, table: str, row: dict) -> None:
    sql, params = insert_sql(table, row)
    conn.execute(sql, params)


def sql_literal(v) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, (int, float)):
        return repr(v)
    return "'" + str(v).replace("'", "''") + "'"


def insert_statement(table: str, row: dict) -> str:
    """The same insert as SQL text, for the sqlite3 shell."""
    return (
        f"INSERT INTO {table} ({', '.join(row)}) VALUES ({', '.join(sql_literal(v) for v in row.values())});"
    )


def drop_and_recreate(conn: sqlite3.Connection, names: list[str], sql: str, params=()) -> None:
    """What a tamperer does: drop the named triggers, run ``sql``, put the triggers back exactly as they were."""
    saved = [
        conn.execute("SELECT sql FROM sqlite_master WHERE type = 'trigger' AND name = ?", [n]).fetchone()[0]
        for n in names
    ]
    for n in names:
        conn.execute(f"DROP TRIGGER {n}")
    conn.execute(sql, params)
    for s in saved:
        conn.execute(s)
    conn.commit()


# ---------------------------------------------------------------------------------------------- schema


def test_schema_objects_are_exactly_the_declared_sql(tmp_path):
    store = new_store(tmp_path / "r.db")
    conn = store._conn
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert conn.execute("PRAGMA application_id").fetchone()[0] == schema.APPLICATION_ID
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    actual = {
        (r[0], r[1]): r[2]
        for r in conn.execute("SELECT type, name, sql FROM sqlite_master WHERE type IN ('table', 'trigger')")
    }
    for key, sql in schema.EXPECTED_SCHEMA.items():
        assert actual.get(key) == sql, key
    assert {t for t in schema.OWN_TABLES} <= {name for (kind, name) in actual if kind == "table"}
    # every table is STRICT: a value of the wrong type is refused, so what verify reads back is what was hashed
    for name, sql in schema.TABLES:
        assert sql.endswith(") STRICT"), name
    store.close()


def test_every_check_and_trigger_is_named_and_documented():
    docs = (REPO / "docs" / "reference" / "store.md").read_text()
    rules = set(schema.TRIGGER_RULES.values()) | set(schema.CHECK_NAMES)
    for name, _ in schema.TRIGGERS:
        assert f"`{name}`" in docs, f"trigger {name} is not documented in docs/reference/store.md"
    for rule in rules:
        assert f"`{rule}`" in docs, f"rule {rule} is not documented in docs/reference/store.md"
    for table, cols in schema.COLUMNS.items():
        for col, _, _ in cols:
            assert f"`{col}`" in docs, f"column {table}.{col} is not documented"
    # every CHECK in the SQL is named (SQLite then reports the name) and explained
    for _, sql in schema.TABLES:
        assert sql.count("CHECK (") == len(re.findall(r"CONSTRAINT \w+ CHECK \(", sql))
    assert set(schema.CHECK_NAMES) == set(schema.CHECK_EXPLANATIONS)


def test_engine_result_without_paired_seeds_cannot_enter_db(tmp_path):
    """Raw SQL, no plugin in the insert path: a kind='engine' row lacking paired seeds is aborted by the DB."""
    run = make_run()
    store = new_store(tmp_path / "r.db", run)
    store.close()
    conn = sqlite3.connect(tmp_path / "r.db")  # a plain connection: only the database's own validator runs
    content = make_engine_result(run).as_row()
    for seeds in ("[]", json.dumps(list(range(N_SEEDS - 1))), None):
        row = dict(content, seeds=seeds)
        row = raw_row(conn, "results", row, nonce_for(run.run_id))
        with pytest.raises(sqlite3.IntegrityError) as info:
            raw_insert(conn, "results", row)
        assert str(info.value).startswith("paired_seeds: "), str(info.value)
        assert rule_of(str(info.value)) == "paired_seeds"
    conn.rollback()
    assert conn.execute("SELECT count(*) FROM results").fetchone()[0] == 0
    # the same row with its paired seeds goes in: the refusal was about the seeds and nothing else
    raw_insert(conn, "results", raw_row(conn, "results", content, nonce_for(run.run_id)))
    conn.commit()
    assert conn.execute("SELECT kind FROM results").fetchall() == [("engine",)]
    conn.close()


def test_valid_rows_are_recorded_and_read_back(tmp_path):
    run = make_run()
    store = new_store(tmp_path / "r.db", run)
    ids = fill(store, run, 3)
    assert ids == [1, 2, 3]
    rows = store.results(run.run_id)
    assert [r["nodeid"] for r in rows] == [make_result(run, i).nodeid for i in range(3)]
    assert rows[0]["prev_hash"] == schema.ZERO_HASH
    assert rows[1]["prev_hash"] == rows[0]["row_hash"]
    assert head(store._conn, "results") == rows[2]["row_hash"]
    assert json.loads(rows[0]["seeds"]) == list(make_result(run, 0).seeds)
    store.record_rejection(Rejection(run.run_id, "x::y", "p", "c", "cpu", "correctness", "rejected", "mismatch"))
    store.finish_run(run.run_id, nonce_for(run.run_id))
    report = store.verify()
    assert report.ok, report.problems
    assert report.counts["results"] == 3 and report.counts["rejections"] == 1
    store.close()


@pytest.mark.parametrize(
    "overrides, rule",
    [
        ({"seeds": (1, 2)}, "paired_seeds"),
        ({"seeds": (1,) * N_SEEDS}, "paired_seeds"),
        ({"measurement": make_measurement(n_pairs=MIN_PAIRS - 1)}, "min_pairs"),
        ({"measurement": make_measurement(speedup=MAX_SPEEDUP * 2)}, "breaker"),
        ({"breaker": "released:99"}, "breaker"),
        ({"correctness": "failed"}, "correctness_passed"),
        ({"probes": {"status": "failed"}}, "probes_passed"),
        ({"integrity": "tampered"}, "integrity_passed"),
        ({"protocol_sha256": PROTO2.sha256}, "protocol_digest"),
        ({"exploratory": True}, "exploratory_flag"),
        ({"problem_sha256": "A" * 64}, "digests"),
        ({"kind": "gpu"}, "kind"),
        ({"run_id": "no-such-run"}, "run_exists"),
    ],
)
def test_api_refusals_name_the_rule(tmp_path, overrides, rule):
    run = make_run()
    store = new_store(tmp_path / "r.db", run)
    with pytest.raises(ValidatorRefusal) as info:
        store.record_result(make_result(run, **overrides), nonce=nonce_for(run.run_id))
    assert info.value.rule == rule
    assert str(info.value).startswith(f"{rule}: ")
    assert store.results() == []
    # a refused insert leaves the chain where it was
    assert head(store._conn, "results") == schema.ZERO_HASH
    store.close()


def test_measurement_check_refusal_explains_itself(tmp_path):
    run = make_run()
    store = new_store(tmp_path / "r.db", run)
    m = make_measurement()
    bad = Measurement(**{**m.__dict__, "speedup": 5.0})  # outside its CI
    with pytest.raises(ValidatorRefusal) as info:
        store.record_result(make_result(run, measurement=bad), nonce=nonce_for(run.run_id))
    assert info.value.rule == "speedup_in_ci"
    assert "ci_low <= speedup <= ci_high" in str(info.value)
    store.close()


def test_breaker_quarantine_and_recorded_release(tmp_path):
    run = make_run()
    store = new_store(tmp_path / "r.db", run)
    nonce = nonce_for(run.run_id)
    fast = make_result(run, 7, measurement=make_measurement(speedup=50.0))
    with pytest.raises(ValidatorRefusal) as info:
        store.record_result(fast, nonce=nonce)
    assert info.value.rule == "breaker"
    # quarantine accepts it (above the breaker), with a reason
    with pytest.raises(ValidatorRefusal) as info:
        store.record_quarantine(QuarantineRecord(fast, "  "), nonce=nonce)
    assert info.value.rule == "quarantine_reason"
    qid = store.record_quarantine(QuarantineRecord(fast, "speedup 50x above breaker 10x"), nonce=nonce)
    # release: recorded, never silent
    with pytest.raises(ValidatorRefusal) as info:
        store.release_quarantine(qid, "ok", "alice")
    assert info.value.rule == "release_reason"
    with pytest.raises(ValidatorRefusal) as info:
        store.release_quarantine(qid + 100, "profiled by hand: genuine", "alice")
    assert info.value.rule == "release_target"
    rel = store.release_quarantine(qid, "profiled by hand: genuine", "alice")
    with pytest.raises(ValidatorRefusal) as info:
        store.release_quarantine(qid, "profiled by hand: twice", "bob")
    assert info.value.rule == "release_once"
    # the release admits this problem + candidate only
    other = make_result(run, 8, measurement=make_measurement(speedup=50.0), breaker=f"released:{rel}")
    with pytest.raises(ValidatorRefusal) as info:
        store.record_result(other, nonce=nonce)
    assert info.value.rule == "breaker"
    admitted = make_result(run, 7, measurement=make_measurement(speedup=50.0), breaker=f"released:{rel}")
    store.record_result(admitted, nonce=nonce)
    (q,) = store.quarantine_list()
    assert q["release_id"] == rel and q["released_by"] == "alice"
    assert [r["id"] for r in q["releases"]] == [rel]
    store.finish_run(run.run_id, nonce)
    assert store.verify().ok
    store.close()


def test_runs_rules(tmp_path):
    store = ResultStore.open(tmp_path / "r.db")
    with pytest.raises(ValidatorRefusal) as info:
        store.begin_run(make_run())
    assert info.value.rule == "protocol_registered"
    store.register_protocol(PROTO, frozen=True)
    store.register_protocol(PROTO, frozen=True)  # idempotent
    with pytest.raises(ValidatorRefusal) as info:
        store.begin_run(make_run("unfrozen", frozen=False, exploratory=False))
    assert info.value.rule == "frozen_or_exploratory"
    store.begin_run(make_run("unfrozen", frozen=False, exploratory=True))
    with pytest.raises(ValidatorRefusal) as info:
        store.begin_run(make_run("unfrozen", frozen=False, exploratory=True))
    assert info.value.rule == "unique"
    # a run row arrives unfinished: the nonce is never written at begin
    conn = store._conn
    row = raw_row(conn, "runs", make_run("raw").as_row(), None)
    row.update(finished_at="2025-01-01T00:00:00", nonce="ab" * 32)
    with pytest.raises(sqlite3.IntegrityError, match=r"^run_starts_open: "):
        raw_insert(conn, "runs", row)
    store.close()


def test_finish_run_commit_reveal(tmp_path):
    run = make_run()
    store = new_store(tmp_path / "r.db", run)
    fill(store, run, 2)
    with pytest.raises(StoreError, match="commitment"):
        store.finish_run(run.run_id, b"\x00" * 32)
    assert store.runs()[0]["nonce"] is None
    store.finish_run(run.run_id, nonce_for(run.run_id))
    (r,) = store.runs()
    assert r["nonce"] == nonce_for(run.run_id).hex()
    assert nonce_commitment(bytes.fromhex(r["nonce"])) == r["nonce_sha256"]
    with pytest.raises(StoreError, match="already finished"):
        store.finish_run(run.run_id, nonce_for(run.run_id))
    with pytest.raises(ValidatorRefusal) as info:
        store.record_result(make_result(run, 5), nonce=nonce_for(run.run_id))
    assert info.value.rule == "run_open"
    with pytest.raises(ValidatorRefusal) as info:
        store.record_rejection(Rejection(run.run_id, "a::b", "p", "c", "cpu", "timing", "error", "late"))
    assert info.value.rule == "run_open"
    store.close()


def test_append_only_everywhere(tmp_path):
    run = make_run()
    store = new_store(tmp_path / "r.db", run)
    nonce = nonce_for(run.run_id)
    fill(store, run, 2)
    fast = make_result(run, 9, measurement=make_measurement(speedup=50.0))
    qid = store.record_quarantine(QuarantineRecord(fast, "above breaker"), nonce=nonce)
    store.release_quarantine(qid, "checked by hand, genuine", "alice")
    store.record_rejection(Rejection(run.run_id, "a::b", "p", "c", "cpu", "correctness", "rejected", "x"))
    conn = store._conn
    attempts = {
        "UPDATE results SET speedup = 3.0": "results_append_only",
        "DELETE FROM results WHERE id = 2": "results_append_only",
        "UPDATE quarantine SET reason = 'x'": "quarantine_append_only",
        "DELETE FROM quarantine": "quarantine_append_only",
        "UPDATE rejections SET detail = 'x'": "rejections_append_only",
        "DELETE FROM rejections": "rejections_append_only",
        "UPDATE quarantine_releases SET reason = 'nothing to see here'": "quarantine_releases_append_only",
        "DELETE FROM quarantine_releases": "quarantine_releases_append_only",
        "UPDATE protocols SET max_speedup = 1000.0": "protocols_append_only",
        "DELETE FROM protocols": "protocols_append_only",
        "DELETE FROM runs": "runs_append_only",
        "UPDATE runs SET exploratory = 1": "runs_finish_once",
        "UPDATE runs SET finished_at = 'x', nonce = 'y', host = 'other'": "runs_finish_once",
        "UPDATE chain_state SET head = '" + "0" * 64 + "', count = 0": "chain_state_guard",
        "DELETE FROM chain_state": "chain_state_guard",
        "INSERT INTO chain_state VALUES ('x', 'y', 0)": "chain_state_guard",
    }
    for sql, rule in attempts.items():
        with pytest.raises(sqlite3.IntegrityError) as info:
            conn.execute(sql)
        assert rule_of(str(info.value)) == rule, (sql, str(info.value))
    store.finish_run(run.run_id, nonce)
    with pytest.raises(sqlite3.IntegrityError, match="runs_finish_once"):
        conn.execute("UPDATE runs SET finished_at = 'again', nonce = ?", ["cd" * 32])
    assert store.verify().ok
    store.close()


def test_rejection_rules(tmp_path):
    run = make_run()
    store = new_store(tmp_path / "r.db", run)
    with pytest.raises(ValidatorRefusal) as info:
        store.record_rejection(Rejection("ghost", "a::b", "p", "c", "cpu", "correctness", "rejected", "x"))
    assert info.value.rule == "run_exists"
    with pytest.raises(ValidatorRefusal) as info:
        store.record_rejection(Rejection(run.run_id, "a::b", "p", "c", "cpu", "correctness", "accepted", "x"))
    assert info.value.rule == "rejection_verdict"
    store.close()


def test_quarantine_gets_the_same_measurement_rules(tmp_path):
    run = make_run()
    store = new_store(tmp_path / "r.db", run)
    nonce = nonce_for(run.run_id)
    cases = {
        "paired_seeds": {"seeds": (3, 3, 3, 3, 3, 3)},
        "min_pairs": {"measurement": make_measurement(speedup=50.0, n_pairs=2)},
        "correctness_passed": {"correctness": "failed"},
        "protocol_digest": {"protocol_sha256": PROTO2.sha256},
        "run_exists": {"run_id": "ghost"},
    }
    for rule, overrides in cases.items():
        with pytest.raises(ValidatorRefusal) as info:
            store.record_quarantine(QuarantineRecord(make_result(run, **overrides), "breaker"), nonce=nonce)
        assert info.value.rule == rule
    store.close()


def test_unknown_column_is_refused(tmp_path):
    run = make_run()
    store = new_store(tmp_path / "r.db", run)
    row = dict(make_result(run).as_row(), sneaky=1)
    with pytest.raises(ValidatorRefusal) as info:
        store.insert_row("results", row, nonce=nonce_for(run.run_id))
    assert info.value.rule == "columns"
    with pytest.raises(StoreError):
        store.insert_row("chain_state", {}, nonce=None)
    store.close()


def test_dry_run_insert_uses_the_same_validator(tmp_path):
    run = make_run()
    nonce = nonce_for(run.run_id)
    dry_run_insert(run, PROTO, "results", make_result(run).as_row(), nonce=nonce)
    with pytest.raises(ValidatorRefusal) as info:
        dry_run_insert(run, PROTO, "results", make_result(run, seeds=(1, 2)).as_row(), nonce=nonce)
    assert info.value.rule == "paired_seeds"
    with pytest.raises(ValidatorRefusal) as info:
        dry_run_insert(run, PROTO, "results", make_result(run, correctness="failed").as_row(), nonce=nonce)
    assert info.value.rule == "correctness_passed"
    with pytest.raises(ValidatorRefusal) as info:
        dry_run_insert(run, PROTO2, "results", make_result(run).as_row(), nonce=nonce)
    assert info.value.rule == "protocol_registered"
    # a released row: checked against a stand-in release of that id for its problem and candidate
    fast = make_measurement(speedup=50.0)
    dry_run_insert(run, PROTO, "results", make_result(run, measurement=fast, breaker="released:7").as_row(), nonce=nonce)
    with pytest.raises(ValidatorRefusal) as info:
        dry_run_insert(run, PROTO, "results", make_result(run, measurement=fast).as_row(), nonce=nonce)
    assert info.value.rule == "breaker"
    with pytest.raises(ValidatorRefusal) as info:
        dry_run_insert(
            run, PROTO, "results", make_result(run, measurement=fast, breaker="released:7", seeds=(1,)).as_row(),
            nonce=nonce,
        )
    assert info.value.rule == "paired_seeds"
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------------------------------------- verify


def _finished_store(tmp_path, n=9) -> tuple[ResultStore, RunRecord]:
    run = make_run()
    store = new_store(tmp_path / "r.db", run)
    fill(store, run, n)
    store.finish_run(run.run_id, nonce_for(run.run_id))
    return store, run


def test_verify_reports_an_edited_row(tmp_path):
    store, _ = _finished_store(tmp_path)
    drop_and_recreate(store._conn, ["results_append_only_update"], "UPDATE results SET speedup = 2.04 WHERE id = 7")
    report = store.verify()
    assert not report.ok
    assert "results row 7 was edited (row_hash mismatch)" in report.problems
    assert any("results row 7 has a bad row_mac" in p for p in report.problems)
    store.close()


def test_verify_reports_a_deleted_row(tmp_path):
    store, _ = _finished_store(tmp_path)
    drop_and_recreate(store._conn, ["results_append_only_delete"], "DELETE FROM results WHERE id = 8")
    report = store.verify()
    assert "results row 8 is missing (chain broken between 7 and 9)" in report.problems
    assert any("chain_state records 9 rows but the table has 8" in p for p in report.problems)
    store.close()


def test_verify_reports_the_last_row_deleted(tmp_path):
    store, _ = _finished_store(tmp_path)
    drop_and_recreate(store._conn, ["results_append_only_delete"], "DELETE FROM results WHERE id = 9")
    report = store.verify()
    assert any("row 9 is missing" in p for p in report.problems), report.problems
    store.close()


def test_verify_reports_a_dropped_trigger(tmp_path):
    store, _ = _finished_store(tmp_path, n=1)
    store._conn.execute("DROP TRIGGER results_paired_seeds")
    store._conn.commit()
    report = store.verify()
    assert not report.ok
    assert any("trigger results_paired_seeds is missing" in p and "paired_seeds" in p for p in report.problems)
    store.close()


def test_verify_reports_a_rewritten_chain_suffix(tmp_path):
    """Recomputing the edited row's row_hash moves the break to the next row (and the MAC still fails)."""
    store, _run = _finished_store(tmp_path)
    conn = store._conn
    row = dict(conn.execute("SELECT * FROM results WHERE id = 5").fetchone())
    row["speedup"] = 2.04
    new_hash = row_hash(row["prev_hash"], canonical_row("results", row))
    drop_and_recreate(
        conn, ["results_append_only_update"], "UPDATE results SET speedup = 2.04, row_hash = ? WHERE id = 5", [new_hash]
    )
    report = store.verify()
    assert any(p.startswith("results row 6: prev_hash is not the row_hash of row 5") for p in report.problems)
    assert any("results row 5 has a bad row_mac" in p for p in report.problems)
    store.close()


def test_verify_replay_catches_a_row_that_bypassed_the_validator(tmp_path):
    """A tamperer who knows the revealed nonce forges a breaker-busting row with a correct hash and MAC, inserting
    it with the validator triggers dropped, then restores them: only the replay through the validator sees it."""
    store, run = _finished_store(tmp_path, n=2)
    conn = store._conn
    forged = make_result(run, 5, measurement=make_measurement(speedup=80.0)).as_row()
    row = raw_row(conn, "results", forged, nonce_for(run.run_id))
    sql, params = insert_sql("results", row)
    drop_and_recreate(conn, ["results_breaker", "results_run_open"], sql, params)
    report = store.verify()
    assert not report.ok
    assert any("replay" in p and "breaker" in p and "results row 3" in p for p in report.problems), report.problems
    # the chain, the MAC and the triggers all check out: the replay is what caught it
    assert not any("row_hash" in p or "row_mac" in p or "trigger" in p for p in report.problems)
    store.close()


def test_forged_row_during_the_run_is_caught_at_finish(tmp_path):
    """The candidate writes a valid-looking row straight into the DB while the run is open: it cannot know the
    nonce, so its MAC is wrong, and finish_run says so."""
    run = make_run()
    store = new_store(tmp_path / "r.db", run)
    fill(store, run, 1)
    conn = sqlite3.connect(tmp_path / "r.db")
    raw_insert(conn, "results", raw_row(conn, "results", make_result(run, 3).as_row(), b"guess" * 7))
    conn.commit()
    conn.close()
    with pytest.raises(StoreError, match=r"results row 2"):
        store.finish_run(run.run_id, nonce_for(run.run_id))
    report = store.verify()
    assert any("results row 2 has a bad row_mac" in p for p in report.problems)
    store.close()


def test_verify_checks_protocol_rows(tmp_path):
    store, _ = _finished_store(tmp_path, n=1)
    drop_and_recreate(store._conn, ["protocols_append_only_update"], "UPDATE protocols SET n_seeds = 1")
    report = store.verify()
    assert any("n_seeds = 1 but its body says 5" in p for p in report.problems), report.problems
    store.close()


def test_rule_of():
    assert rule_of("paired_seeds: x") == "paired_seeds"
    assert rule_of("CHECK constraint failed: digests") == "digests"
    assert rule_of("NOT NULL constraint failed: results.seeds") == "not_null"
    assert rule_of("UNIQUE constraint failed: results.run_id, results.nodeid") == "unique"
    assert rule_of("cannot store TEXT value in REAL column results.speedup") == "datatype"
