#!/usr/bin/env bash
# KernelBench v0's Level-1 problems for the CPU A/A (docs/results/cpu.md): elementwise 19-32, norms 36/38/39, reductions
# 47-53, copied unchanged from the commit before KernelBench scaled its sizes up (b08d959^, 16 x 16384 batches),
# into the ignored folder .kb-v0/ (problems are read, never committed here).
#
#   bash benchmarks/harness/kb_v0_stage.sh /path/to/KernelBench-clone-or-bare-repo
#   python3 benchmarks/harness/bench_harness.py aa --repeats 1 --out aa.json -- --problems=.kb-v0 .kb-v0
set -euo pipefail
SRC="${1:?a KernelBench git repository (a clone, or the bare repo of a mirror)}"
ROOT="$(git rev-parse --show-toplevel)"
OUT="$ROOT/.kb-v0"
GIT=(git --git-dir="$(git -C "$SRC" rev-parse --absolute-git-dir 2>/dev/null || echo "$SRC")")
REV="$("${GIT[@]}" rev-parse b08d959^)"
mkdir -p "$OUT"
n=0
for f in $("${GIT[@]}" ls-tree --name-only "$REV" KernelBench/level1/); do
  b="$(basename "$f")"
  case "${b%%_*}" in
    19|2[0-9]|3[0-2]|36|38|39|4[7-9]|5[0-3]) ;;
    *) continue ;;
  esac
  "${GIT[@]}" show "$REV:$f" > "$OUT/kb${b}"
  n=$((n + 1))
done
echo "staged $n problems of KernelBench $REV in $OUT"
