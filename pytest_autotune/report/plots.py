"""PNG plots (matplotlib, Agg; ``autotune plot ...`` and ``--autotune-plots=DIR``), docs/guide/studies.md:

* ``speedups.png`` -- each item's honest speedup with its 95% CI against the strongest frozen baseline (log
  scale), the strawman speedup against the naive reference as a hollow marker, refused items listed with their
  gate;
* ``study-<name>.png`` -- a study's best-so-far trajectories per arm and problem, usable iterations as dots,
  unusable ones as crosses under the axis, the CI band of the best so far, and the verdict in the title;
* ``aa.png`` -- the A/A distribution (the reference against itself): histogram and per-item CIs;
* ``transfer.png`` -- held-out transfer ratios (held-out speedup / origin speedup) per item.

Every function takes plain dicts (report items, study report JSON), so the same code draws a live session, a
store or a committed JSON report. Figures are built with :class:`matplotlib.figure.Figure` (no pyplot state).
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Optional, Sequence

from ..errors import AutotuneUsageError

if TYPE_CHECKING:  # pragma: no cover
    from .snapshot import SessionSnapshot

AA_CANDIDATE = "reference-aa"
_COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]


def _figure(width: float, height: float):
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise AutotuneUsageError("plots need matplotlib: pip install 'pytest-autotune[plots]' "
                                 "(or pip install matplotlib)") from None
    fig = Figure(figsize=(width, height), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _save(fig: Any, path: Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, bbox_inches="tight")
    return path


def _log_limits(values: Iterable[float], pad: float = 1.25) -> tuple[float, float]:
    vs = [v for v in values if v is not None and v > 0 and math.isfinite(v)] + [1.0]
    return min(vs) / pad, max(vs) * pad


# ---------------------------------------------------------------------------------------------- speedups


def _speedup_axis(ax: Any, lo: float, hi: float) -> None:
    """Log x axis with plain tick labels (0.5x, 1x, 2x ...)."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    ax.set_xscale("log")
    ax.set_xlim(lo, hi)
    ticks = [t for t in (0.1, 0.2, 0.3, 0.5, 0.75, 1, 1.5, 2, 3, 4, 6, 8, 10, 15, 20, 30) if lo <= t <= hi]
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}x"))


def plot_speedups(items: Sequence[dict], path: Path, title: str = "") -> Path:
    """Per-item speedup with CI against the honest (strongest frozen) baseline, and the strawman marker."""
    items = sorted(items, key=lambda i: (i["problem"], i["candidate"]))
    n = max(len(items), 1)
    fig = _figure(10.0, 1.4 + 0.34 * n)
    ax = fig.add_subplot(1, 1, 1)
    labels = []
    xs_all: list[float] = []
    shown = {"ci": False, "strawman": False}
    for y, it in enumerate(items):
        baseline = it.get("baseline")
        labels.append(f"{it['problem']} / {it['candidate']}"
                      + (f"  (vs {baseline})" if baseline and baseline != "reference" else ""))
        sp = it.get("speedup")
        if it.get("verdict") == "accepted" and sp:
            lo, hi = it.get("ci") or [sp, sp]
            ax.errorbar([sp], [y], xerr=[[sp - lo], [hi - sp]], fmt="o", color=_COLORS[0], ecolor=_COLORS[0],
                        capsize=3, ms=5, label=None if shown["ci"] else "speedup vs the strongest frozen baseline, "
                        "95% CI")
            shown["ci"] = True
            xs_all += [lo, hi, sp]
            st = it.get("strawman_speedup")
            if st and abs(st - sp) > 1e-9 * sp:
                ax.plot([st], [y], marker="^", mfc="none", mec=_COLORS[4], ms=7, ls="none",
                        label=None if shown["strawman"] else "strawman: the same candidate vs the naive reference")
                shown["strawman"] = True
                xs_all.append(st)
        else:
            gate = it.get("gate") or "-"
            ax.plot([1.0], [y], marker="x", color="#888888", ms=6, ls="none")
            ax.annotate(f"{it.get('verdict', '?')} ({gate})", (1.0, y), xytext=(6, -3), textcoords="offset points",
                        fontsize=7, color="#888888")
    ax.axvline(1.0, color="#333333", lw=0.8, ls="--")
    _speedup_axis(ax, *_log_limits(xs_all))
    ax.set_yticks(range(len(items)))
    ax.set_yticklabels(labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("speedup = baseline time / candidate time (log scale; dashed: 1x)")
    ax.grid(axis="x", alpha=0.25)
    if shown["ci"] or shown["strawman"]:
        ax.legend(fontsize=7, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=2, frameon=False)
    fig.suptitle(title or "speedups", fontsize=10)
    return _save(fig, path)


# ---------------------------------------------------------------------------------------------- A/A


def plot_aa(items: Sequence[dict], path: Path, title: str = "") -> Path:
    aa = [i for i in items if i.get("candidate") == AA_CANDIDATE and i.get("verdict") == "accepted"
          and i.get("speedup")]
    if not aa:
        raise AutotuneUsageError("no accepted A/A item to plot: measure with --autotune-aa")
    aa = sorted(aa, key=lambda i: i["speedup"])
    sps = [i["speedup"] for i in aa]
    covers = sum(1 for i in aa if i["ci"][0] <= 1.0 <= i["ci"][1])
    fig = _figure(11.0, 3.2 + 0.18 * len(aa))
    grid = fig.add_gridspec(2, 2, width_ratios=[1.0, 1.3], height_ratios=[1.0, 1.0])
    ax1 = fig.add_subplot(grid[0, 0])
    bins = max(5, min(30, len(sps)))
    ax1.hist(sps, bins=bins, color=_COLORS[0], alpha=0.75)
    ax1.axvline(1.0, color="#333333", lw=1, ls="--", label="1.0 (no difference)")
    med = statistics.median(sps)
    ax1.axvline(med, color=_COLORS[1], lw=1, label=f"median {med:.4f}")
    ax1.set_xlabel("A/A speedup (the reference against itself)")
    ax1.set_ylabel("items")
    ax1.legend(fontsize=7)
    ax2 = fig.add_subplot(grid[:, 1])
    for y, it in enumerate(aa):
        lo, hi = it["ci"]
        ok = lo <= 1.0 <= hi
        ax2.errorbar([it["speedup"]], [y], xerr=[[it["speedup"] - lo], [hi - it["speedup"]]], fmt="o", ms=3,
                     color=_COLORS[0] if ok else _COLORS[1], capsize=2)
    ax2.axvline(1.0, color="#333333", lw=0.8, ls="--")
    ax2.set_yticks(range(len(aa)))
    ax2.set_yticklabels([i["problem"] for i in aa], fontsize=7)
    ax2.set_xlabel("A/A speedup, 95% CI (red: CI excludes 1.0)")
    fig.suptitle((title + ": " if title else "") + f"A/A: {len(aa)} items, median {med:.4f}, CI covers 1.0 in "
                 f"{covers}/{len(aa)}", fontsize=10)
    return _save(fig, path)


# ---------------------------------------------------------------------------------------------- transfer


def plot_transfer(items: Sequence[dict], path: Path, title: str = "") -> Path:
    rows = [i for i in items if i.get("transfer_ratio")]
    if not rows:
        raise AutotuneUsageError("no transfer ratio to plot: measure the held-out leg (--device=mlx) first")
    rows = sorted(rows, key=lambda i: (i["problem"], i["candidate"]))
    fig = _figure(9.0, 1.4 + 0.38 * len(rows))
    ax = fig.add_subplot(1, 1, 1)
    ratios = [r["transfer_ratio"] for r in rows]
    colors = [_COLORS[2] if (r.get("speedup") or 0) >= 1.0 else _COLORS[1] for r in rows]
    ax.barh(range(len(rows)), ratios, color=colors, alpha=0.8)
    for y, r in enumerate(rows):
        t = (r.get("details") or {}).get("transfer") or {}
        origin = t.get("origin_speedup")
        text = (f"{origin:.2f}x on {t.get('origin_device', '?')} -> {r['speedup']:.2f}x here"
                if origin and r.get("speedup") else f"ratio {r['transfer_ratio']:.2f}")
        if t.get("verdict"):
            text += f": {t['verdict']}"
        ax.annotate(text, (r["transfer_ratio"], y), xytext=(4, -3), textcoords="offset points", fontsize=7)
    ax.axvline(1.0, color="#333333", lw=0.8, ls="--")
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([f"{r['problem']} / {r['candidate']}" for r in rows], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("transfer ratio = held-out speedup / origin speedup (red: slower than the baseline there)")
    ax.set_xlim(0, max(ratios + [1.0]) * 2.0)  # room for the annotations
    ax.set_title(title or "held-out transfer ratios", fontsize=10)
    return _save(fig, path)


# ---------------------------------------------------------------------------------------------- studies


def plot_study(report: dict, path: Path) -> Path:
    """Best-so-far trajectories per arm (one panel per problem); unusable iterations as crosses under the
    axis."""
    arms = report.get("arms") or []
    problems: list[str] = []
    for a in arms:
        for t in a["trajectories"]:
            if t["problem"] not in problems:
                problems.append(t["problem"])
    if not problems:
        raise AutotuneUsageError(f"study {report.get('study')} has no iterations to plot")
    fig = _figure(8.5, 2.2 + 2.6 * len(problems))
    for k, problem in enumerate(problems):
        ax = fig.add_subplot(len(problems), 1, k + 1)
        ys: list[float] = []
        max_it = 1
        any_bad = False
        for j, arm in enumerate(arms):
            color = _COLORS[j % len(_COLORS)]
            traj = next((t for t in arm["trajectories"] if t["problem"] == problem), None)
            if traj is None:
                continue
            pts = traj["points"]
            its = [p["iteration"] for p in pts]
            max_it = max([max_it] + its)
            best = [p["best_so_far"] for p in pts]
            xs_b = [i for i, b in zip(its, best) if b is not None]
            ys_b = [b for b in best if b is not None]
            if xs_b:
                # the step holds each best-so-far until the next iteration; the last one to the end of its slot
                end = max(its) + 0.45
                ax.step(xs_b + [end], ys_b + [ys_b[-1]], where="post", color=color, lw=1.8,
                        label=f"{arm['arm']}: best so far ({traj['usable']}/{traj['total']} usable)")
                lo: list[float] = [p["best_so_far_ci"][0] for p in pts if p["best_so_far"] is not None]
                hi: list[float] = [p["best_so_far_ci"][1] for p in pts if p["best_so_far"] is not None]
                ax.fill_between(xs_b + [end], lo + [lo[-1]], hi + [hi[-1]], step="post", color=color, alpha=0.12)
                ys += lo + hi
            else:
                ax.plot([], [], color=color, label=f"{arm['arm']}: no usable iteration (0/{traj['total']})")
            u = [(p["iteration"], p["speedup"]) for p in pts if p["usable"] and p["speedup"]]
            if u:
                ax.plot([x for x, _ in u], [y for _, y in u], "o", color=color, ms=4, alpha=0.7)
                ys += [y for _, y in u]
            bad = [p["iteration"] for p in pts if not p["usable"]]
            any_bad = any_bad or bool(bad)
            if bad:
                # in a strip at the bottom of the panel: x in data, y in axes coordinates
                ax.plot([b + 0.06 * (j - (len(arms) - 1) / 2) for b in bad], [0.05] * len(bad), "x", color=color,
                        ms=8, mew=2, transform=ax.get_xaxis_transform(),
                        label=f"{arm['arm']}: unusable iteration ({len(bad)})")
        pair = next((p for p in report.get("pairs") or [] if p["problem"] == problem), None)
        if pair and pair.get("saturated"):
            ax.annotate("saturated: both arms at their best from iteration 1", (0.01, 0.95), xycoords="axes fraction",
                        fontsize=8, color="#555555", va="top")
        ax.axhline(1.0, color="#333333", lw=0.7, ls="--")
        if ys:
            y_lo, y_hi = min(ys + [1.0]), max(ys + [1.0])
            span = y_hi - y_lo or 0.1
            # room at the bottom for the strip of unusable iterations
            ax.set_ylim(y_lo - (0.2 if any_bad else 0.08) * span, y_hi + 0.15 * span)
        if any_bad:
            from matplotlib.patches import Rectangle

            ax.add_patch(Rectangle((0, 0), 1, 0.1, transform=ax.transAxes, color="#eeeeee", zorder=0, lw=0))
        ax.set_xlim(0.5, max_it + 0.5)
        ax.set_xticks(range(1, max_it + 1) if max_it <= 30 else ax.get_xticks())
        ax.set_ylabel(f"{problem}\nspeedup")
        ax.grid(alpha=0.25)
        ax.legend(fontsize=7, loc="lower right")
        if k == len(problems) - 1:
            ax.set_xlabel("iteration" + (" (crosses in the grey strip: an iteration with no accepted measurement)"
                                         if any_bad else " (every iteration usable)"))
    fig.suptitle(f"study {report.get('study')}: {report.get('label', '')}", fontsize=10)
    return _save(fig, path)


# ---------------------------------------------------------------------------------------------- session


def write_session_plots(snap: "SessionSnapshot", folder: Path) -> tuple[list[Path], list[str]]:
    """``--autotune-plots=DIR``: what the session measured. Study trajectories come from the store (every
    iteration of the study so far, not only this session's). Returns the files written and the errors met."""
    items = [o.to_json() for o in snap.outcomes]
    written: list[Path] = []
    errors: list[str] = []
    title = f"run {snap.run_id[:12]} on {snap.device} (protocol {snap.protocol.version})"
    folder = Path(folder)
    plain = [i for i in items if i["candidate"] != AA_CANDIDATE]
    try:
        if plain:
            written.append(plot_speedups(plain, folder / "speedups.png", title))
        if any(i["candidate"] == AA_CANDIDATE and i["verdict"] == "accepted" for i in items):
            written.append(plot_aa(items, folder / "aa.png", title))
        if any(i.get("transfer_ratio") for i in items):
            written.append(plot_transfer(items, folder / "transfer.png", title))
        studies = sorted({o.details["study"]["study"] for o in snap.outcomes if o.details.get("study")
                          and not o.details["study"]["study"].startswith("anchor:")})
        if studies and snap.measuring and snap.db is not None:
            from ..store import ResultStore
            from ..study.report import build_study_report

            with ResultStore.open(snap.db, readonly=True) as store:
                for name in studies:
                    rep = build_study_report(store, name, snap.rootpath, snap.protocol)
                    written.append(plot_study(rep.to_json(), folder / f"study-{_safe(name)}.png"))
    except AutotuneUsageError as e:
        errors.append(f"plots: {e}")
    return written, errors


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in name)


def items_from_store(results: Iterable[dict], rejections: Iterable[dict] = ()) -> list[dict]:
    """Report-like items from store rows (for plots of a recorded run)."""
    out: list[dict] = []
    for r in results:
        out.append({"nodeid": r["nodeid"], "problem": r["problem"], "candidate": r["candidate"],
                    "verdict": "accepted", "gate": None, "speedup": r["speedup"], "ci": [r["ci_low"], r["ci_high"]],
                    "strawman_speedup": r["strawman_speedup"], "baseline": r["baseline"],
                    "transfer_ratio": r.get("transfer_ratio"), "details": {}})
    for j in rejections:
        out.append({"nodeid": j["nodeid"], "problem": j["problem"], "candidate": j["candidate"],
                    "verdict": j["verdict"], "gate": j["gate"], "speedup": None, "ci": None,
                    "strawman_speedup": None, "baseline": None, "transfer_ratio": None, "details": {}})
    return out


def default_title(run: Optional[dict]) -> str:
    if not run:
        return ""
    return f"run {str(run.get('run_id'))[:12]} on {run.get('device')} (protocol {run.get('protocol_version')})"
