"""How far apart two items that compute the same thing read in the cheat catalog's main session (docs/design/protocol.md#fresh-placements): ``softmax_rows`` with ``honest_fused``, ``cheat_instance_patch`` (the same ``torch.softmax``)
and ``honest_inplace``, in the catalog's own fast protocol (one pair of processes, 0.6 s an item), alternately with
fixed and fresh placements.

    python3 benchmarks/harness/catalog_pair_offsets.py OUT_DIR [SESSIONS]

Each session prints the three speedups with their CIs and writes ``OUT_DIR/r<span>-<i>.json``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))

from conftest import fast_protocol_text  # noqa: E402

MAIN = {"timing.min_sample_s": "0.002", "timing.min_pairs": "32", "timing.max_calls_per_sample": "16",
        "engines.windows_per_launch": "16"}  # tests/test_cheat_catalog.py SESSION_PROTOCOL["main"]


def main(argv: list[str]) -> int:
    out = Path(argv[0]).resolve()
    sessions = int(argv[1]) if len(argv) > 1 else 6
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        shutil.copytree(REPO / "tests/cheats/problems", root / "problems")
        shutil.copytree(REPO / "tests/cheats/candidates", root / "candidates")
        for i in range(sessions):
            for span in (["0", "1024"] if i % 2 == 0 else ["1024", "0"]):
                (root / "protocol.toml").write_text(
                    fast_protocol_text(**MAIN, **{"devices.cpu.placement_span_kib": span}))
                report = out / f"r{span}-{i}.json"
                subprocess.run([sys.executable, "-m", "pytest", "--autotune", "--autotune-exploratory", "--problems",
                                "problems", "--candidates", "candidates", "--autotune-json", str(report), "-p",
                                "no:cacheprovider", "-q", "-k",
                                "softmax_rows and (honest_fused or cheat_instance_patch or honest_inplace)"],
                               cwd=root, capture_output=True)
                items = json.loads(report.read_text())["items"]
                print(span, i, {it["candidate"]: (round(it["speedup"], 3), [round(x, 3) for x in it["ci"]])
                                for it in items if it.get("speedup")}, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
