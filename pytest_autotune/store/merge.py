"""``autotune merge A.db B.db -o all.db``: copy runs from several stores into one, through the target's validator
(docs/reference/store.md#merge; the copying itself is :mod:`.copier`).

Each source is opened read-only and verified first; one that fails verify is refused unless ``force``, and then
still merged row by row through the validator with every MAC checked. A run already in the target (same run_id) is
skipped as a duplicate, so merging the same source twice inserts nothing. A row the validator refuses (or, for a
finished run, whose MAC does not match the revealed nonce) is reported and not inserted. An unfinished source run
is merged and stays unfinished. Finally the target is verified.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import StoreError
from .copier import Copier, MergeReport, Sink
from .db import ResultStore

__all__ = ["MergeReport", "merge_databases"]


def merge_databases(sources: list[Path], target: Path, *, force: bool = False) -> MergeReport:
    """Merge ``sources`` into ``target`` (created if missing). See the module docstring."""
    report = MergeReport()
    sink = Sink(report)
    target = Path(target).expanduser().absolute()
    for s in sources:
        sp = Path(s).expanduser().absolute()
        if sp == target or (sp.exists() and target.exists() and sp.samefile(target)):
            raise StoreError(f"cannot merge {sp} into itself: pass a different -o target")
    store = ResultStore.open(target)
    try:
        for s in sources:
            sp = Path(s).expanduser().absolute()
            try:
                src = ResultStore.open(sp, readonly=True)
            except StoreError as e:
                report.sources_refused += 1
                report.messages.append(f"{sp}: refused: {e}")
                continue
            try:
                v = src.verify()
                if not v.ok:
                    shown = "; ".join(v.problems[:5]) + ("; ..." if len(v.problems) > 5 else "")
                    if not force:
                        report.sources_refused += 1
                        report.messages.append(
                            f"{sp}: refused, it fails verify ({len(v.problems)} problem(s): {shown}); run "
                            "autotune verify on it, or pass --force to merge it row by row"
                        )
                        continue
                    report.messages.append(
                        f"{sp}: fails verify ({len(v.problems)} problem(s): {shown}); merging anyway (--force): "
                        "every row is re-validated and MAC-checked"
                    )
                Copier(src, str(sp), store, sink, check_macs=True).run()
            finally:
                src.close()
        final = store.verify()
        if not final.ok:
            report.target_ok = False
            report.messages.extend(f"target {target}: {p}" for p in final.problems)
    finally:
        store.close()
    return report
