"""The session-end table: problem, candidate, verdict, speedup [CI], baseline."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..gates.breaker import format_speedup
from .json_report import bars, summarize
from .precision import session_precision

if TYPE_CHECKING:  # pragma: no cover
    from .snapshot import SessionSnapshot


def _fmt(x: float) -> str:
    return format_speedup(x)


def write_findings(tr: Any, outs: list) -> None:
    """Wrong answers beyond the problems' contracts: reported on the item, not refused (docs/guide/contract.md)."""
    found = [(o, f) for o in outs for f in (o.details.get("findings") or [])]
    if not found:
        return
    tr.write_line(f"findings beyond the contract ({len(found)}; reported, not refused -- --autotune-strict-contract "
                  "refuses them):", bold=True)
    for o, f in found:
        what = f["what"] if len(f["what"]) <= 160 else f["what"][:157].rstrip("; ") + "..."
        tr.write_line(f"  {o.problem}/{o.candidate}: wrong on {f['clause']} {f['input']}: {what}; fix: {f['fix']}")


def write_summary(tr: Any, snap: "SessionSnapshot") -> None:
    outs = sorted(snap.outcomes, key=lambda o: (o.problem, o.candidate))
    tr.write_sep("=", f"pytest-autotune: {len(outs)} item(s) on {snap.device}"
                      + ("" if snap.measuring else " (correctness only: add --autotune to time)"))
    kb = any(o.details.get("kernelbench") for o in outs)  # KernelBench's own verdict beside ours, where recorded
    rows = [("problem", "candidate", "verdict", "speedup [95% CI]", "vs naive", "baseline", "pairs")
            + (("KernelBench",) if kb else ())]
    for o in outs:
        m = o.measurement
        if m is not None:
            sp = f"{_fmt(m.speedup)} [{_fmt(m.ci_low)}, {_fmt(m.ci_high)}]"
            naive = _fmt(m.strawman_speedup)
            pairs = str(m.n_pairs)
        else:
            sp, naive, pairs = "-", "-", "-"
        verdict = o.verdict if not o.gate else f"{o.verdict} ({o.gate})"
        rows.append((o.problem, o.candidate, verdict, sp, naive, o.baseline or "-", pairs)
                    + ((str((o.details.get("kernelbench") or {}).get("verdict", "-")),) if kb else ()))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for i, r in enumerate(rows):
        tr.write_line("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip(), bold=(i == 0))
    write_findings(tr, outs)
    precision = session_precision(snap)
    if precision is not None:  # one line for the run, not a warning per item (docs/guide/precision.md)
        tr.write_line(precision.line())
    transfers = [(o, o.details["transfer"]) for o in outs if o.details.get("transfer")]
    if transfers:
        tr.write_line("")
        tr.write_line(f"held-out retest on {snap.device} (baseline re-derived here; "
                      "transfer ratio = held-out speedup / origin speedup):", bold=True)
        for o, t in transfers:
            tr.write_line(f"  {o.problem}/{o.candidate}: origin {_fmt(t['origin_speedup'])} on {t['origin_device']} "
                          f"-> {_fmt(t['heldout_speedup'])} here, transfer ratio {t['transfer_ratio']:.2f}: "
                          f"{t['verdict']}  [{t['retest_of']}]")
    s = summarize(outs, snap.protocol.bars.fast_p_thresholds, snap.measuring)
    fp = ", ".join(f"fast_{k}={'-' if v is None else f'{v:.2f}'}" for k, v in s["fast_p"].items())
    med = "-" if s["median_speedup"] is None else _fmt(s["median_speedup"])
    tr.write_line(f"accepted {s['accepted']}, rejected {s['rejected']}, quarantined {s['quarantined']}, "
                  f"error {s['error']}; {fp}; median speedup {med}")
    if snap.measuring:
        tr.write_line("bars: " + ", ".join(f"{b['name']} {b['status']}" for b in bars(s, snap.protocol.bars)))
    iso = snap.isolation
    if iso is not None:
        tr.write_line(f"sandbox isolation: {iso.described}"
                      + (" -- missing: " + ", ".join(iso.missing) + " (see the warning)" if iso.weak else ""),
                      red=iso.weak, bold=iso.weak)
    status = "frozen" if snap.frozen else "NOT FROZEN (exploratory)"
    tr.write_line(f"protocol {snap.protocol.version} sha256 {snap.protocol.sha256[:16]}... {status}")
    if snap.measuring and snap.recorded:
        tr.write_line(f"run {snap.run_id} recorded in {snap.db}")
    for err in snap.store_errors:
        tr.write_line(f"STORE: {err}", red=True)
