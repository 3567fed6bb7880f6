"""The measurement rules (docs/reference/store.md#rules): the CHECKs and triggers every ``results`` and ``quarantine``
row meets (migration 0001). ``results`` alone has the breaker rule: a measurement above the breaker belongs in
quarantine.

Part of what migration 0001 executes (see :mod:`.sqlbuild`): change only by adding functions.
"""

from __future__ import annotations

from .chain_rules import Named, chain_triggers
from .sqlbuild import (
    MAX_REAL,
    SEEDS_VALID,
    check,
    finite_positive,
    hex64,
    json_is,
    protocol_param,
    run_exists,
    run_field,
    run_finished,
    timestamp,
    trigger,
)


def measurement_checks() -> list[str]:
    """The CHECKs of a results/quarantine table (lines of its CREATE TABLE)."""
    digests = " AND ".join(
        hex64(c) for c in ("problem_sha256", "candidate_sha256", "baseline_sha256", "protocol_sha256")
    )
    return [
        check("kind", "kind IN ('kernel', 'engine')"),
        check(
            "names",
            "length(nodeid) > 0 AND length(problem) > 0 AND length(candidate) > 0 "
            "AND length(baseline) > 0 AND length(device) > 0",
        ),
        check("digests", digests),
        check("times_positive", f"{finite_positive('candidate_s')} AND {finite_positive('baseline_s')}"),
        check("speedup_in_ci", f"0 < ci_low AND ci_low <= speedup AND speedup <= ci_high AND ci_high <= {MAX_REAL}"),
        check("strawman_speedup", finite_positive("strawman_speedup")),
        check("correctness_passed", "correctness = 'passed'"),
        check(
            "probes_passed",
            "CASE WHEN json_valid(probes) THEN (CASE WHEN json_type(probes) = 'object' "
            "THEN json_extract(probes, '$.status') IN ('passed', 'disabled') ELSE 0 END) ELSE 0 END",
        ),
        check("integrity_passed", "integrity = 'passed'"),
        check("flags", "ci_target_met IN (0, 1) AND exploratory IN (0, 1)"),
        check("iteration", "iteration IS NULL OR iteration >= 0"),
        check("provenance_json", json_is("provenance", "object")),
        check("created_at", timestamp("created_at")),
        check("row_mac", hex64("row_mac")),
    ]


def run_rules(table: str) -> list[Named]:
    """``run_exists`` and ``run_open``: a row of ``table`` names an open run."""
    return [
        (
            f"{table}_run_exists",
            trigger(f"{table}_run_exists", "BEFORE INSERT", table, f"NOT {run_exists()}", "run_exists",
                    f"{table}.run_id must name a row of runs; begin the run (ResultStore.begin_run) first"),
        ),
        (
            f"{table}_run_open",
            trigger(f"{table}_run_open", "BEFORE INSERT", table, run_finished(), "run_open",
                    "the run is finished (its nonce is revealed); rows can only be recorded while their run is open"),
        ),
    ]


def _breaker() -> Named:
    max_speedup = protocol_param("max_speedup")
    return (
        "results_breaker",
        trigger(
            "results_breaker",
            "BEFORE INSERT",
            "results",
            f"{run_exists()} AND NOT coalesce((NEW.breaker = 'ok' AND NEW.speedup <= {max_speedup}) "
            "OR (NEW.breaker GLOB 'released:[1-9]*' AND EXISTS (SELECT 1 FROM quarantine_releases AS rel "
            "JOIN quarantine AS q ON q.id = rel.quarantine_id WHERE 'released:' || rel.id = NEW.breaker "
            "AND q.problem = NEW.problem AND q.candidate_sha256 = NEW.candidate_sha256)), 0)",
            "breaker",
            "speedup is above the protocol breaker (protocols.max_speedup of the run) or breaker is not "
            "ok; such a measurement goes to quarantine, and only a recorded release (breaker = released:ID "
            "naming a quarantine_releases row for the same problem and candidate_sha256) lets it in",
        ),
    )


def measurement_triggers(table: str) -> list[Named]:
    """The triggers of a results/quarantine table, its hash chain included."""
    exists = run_exists()
    out = run_rules(table) + [
        (
            f"{table}_paired_seeds",
            trigger(
                f"{table}_paired_seeds",
                "BEFORE INSERT",
                table,
                f"{exists} AND NOT {SEEDS_VALID}",
                "paired_seeds",
                "seeds must be a JSON array of at least the protocol seed count (protocols.n_seeds of the run) "
                "distinct non-negative integers; every timing is paired on fresh seeds",
            ),
        ),
        (
            f"{table}_min_pairs",
            trigger(
                f"{table}_min_pairs",
                "BEFORE INSERT",
                table,
                f"{exists} AND NOT coalesce(NEW.n_pairs >= {protocol_param('min_pairs')}, 0)",
                "min_pairs",
                "n_pairs is below the protocol minimum (protocols.min_pairs of the run); measure more pairs",
            ),
        ),
        (
            f"{table}_protocol_digest",
            trigger(
                f"{table}_protocol_digest",
                "BEFORE INSERT",
                table,
                f"{exists} AND NEW.protocol_sha256 IS NOT {run_field('protocol_sha256')}",
                "protocol_digest",
                "protocol_sha256 differs from the protocol of its run (runs.protocol_sha256)",
            ),
        ),
        (
            f"{table}_exploratory_flag",
            trigger(
                f"{table}_exploratory_flag",
                "BEFORE INSERT",
                table,
                f"{exists} AND NEW.exploratory IS NOT {run_field('exploratory')}",
                "exploratory_flag",
                "exploratory must equal the exploratory flag of its run (runs.exploratory)",
            ),
        ),
    ]
    if table == "results":
        out.append(_breaker())
    return out + chain_triggers(table)
