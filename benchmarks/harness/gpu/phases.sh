#!/usr/bin/env bash
# Several measuring phases in ONE run on the GPU host, within one time budget, each writing as it goes:
#
#   BUDGET=570 bash benchmarks/harness/gpu/phases.sh OUT_DIR headstart suite kb20
#   BUDGET=570 bash benchmarks/harness/gpu/phases.sh OUT_DIR anchors
#   KB_K="19_ReLU or 88_" bash benchmarks/harness/gpu/phases.sh OUT_DIR kb-l1:150 jail   # PHASE:SECONDS caps a phase
#
# Phases: units, jail, headstart (run_h200.sh headstart: the head start outside the sandboxes, anchors and 09/12),
# suite (run_h200.sh full: the bundled suite + both A/A yardsticks + do_bench), remeasure, anchors (anchors_h200.sh:
# every anchor in one pytest call, do_bench and KernelBench-style means beside each, anchor_gap.py's tables with the
# headstart phase's probe when it ran first), kb20 (run_h200.sh kb20: 20 KernelBench Level-1 problems at published
# sizes in A/A, drawn by KB_SEED or a fresh seed, printed), compiled (run_h200.sh compiled: the CUDA C++ and Triton
# candidates, a second session on the warm build cache, do_bench of the same modules, the build tests and the
# adversarial kernels), kb-l1 (run_h200.sh kb-l1, given whatever time is left;
# KB_DONE skips earlier items). Each phase writes under OUT_DIR/<phase>/; after each one OUT_DIR is also packed into
# OUT_DIR.tgz beside it (one file to copy back), and a phase that would start with less than MIN_PHASE seconds left
# is skipped. A phase's own limit is what remains of BUDGET (seconds from this script's start) less a margin for the
# packing; a phase cut short keeps what it wrote (run_h200.sh and anchors_h200.sh write as they go). Run from the
# root of any copy of the repository, staged as run_h200.sh says (copy `.whl/` to the GPU host).
set -u -o pipefail
[ $# -ge 1 ] || { echo "usage: phases.sh OUT_DIR PHASE[:SECONDS]..." >&2; exit 2; }
RESULTS="$(realpath -m "$1")"
shift
BUDGET="${BUDGET:-570}"
MIN_PHASE="${MIN_PHASE:-45}"
mkdir -p "$RESULTS"
T0=$(date +%s)
left() { echo $(( BUDGET - ($(date +%s) - T0) - 15 )); }
pack() { tar czf "$RESULTS.tgz.tmp" -C "$RESULTS" . 2>/dev/null && mv "$RESULTS.tgz.tmp" "$RESULTS.tgz"; }
note() { echo "[phases $(( $(date +%s) - T0 ))s] $*" | tee -a "$RESULTS/phases.txt"; }
[ -f pyproject.toml ] && [ -d pytest_autotune ] || { echo "run from the repository root" >&2; exit 2; }
{
  echo "git=$(git rev-parse HEAD 2>/dev/null) dirty=$(git status --porcelain 2>/dev/null | wc -l) phases=$*"
  nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv 2>&1
} >>"$RESULTS/phases.txt"
for spec in "$@"; do
  phase="${spec%%:*}"
  budget=$(left)
  if [ "$spec" != "$phase" ] && [ "${spec#*:}" -lt "$budget" ]; then budget="${spec#*:}"; fi  # phase:SECONDS caps it
  if [ "$budget" -lt "$MIN_PHASE" ]; then note "skip $phase: ${budget}s left"; continue; fi
  note "start $phase (limit ${budget}s)"
  dir="$RESULTS/$phase"
  mkdir -p "$dir"
  case "$phase" in
    units|jail|jail-cuda|remeasure)
      timeout -k 10 "$budget" bash benchmarks/harness/gpu/run_h200.sh "$phase" "$dir" >/dev/null 2>&1 ;;
    headstart)
      PROBE_TIMEOUT=$(( budget - 20 )) timeout -k 10 "$budget" bash benchmarks/harness/gpu/run_h200.sh headstart \
        "$dir" >/dev/null 2>&1 ;;
    suite)
      RUN_TIMEOUT=$(( budget - 60 > 120 ? budget - 60 : 120 )) timeout -k 10 "$budget" \
        bash benchmarks/harness/gpu/run_h200.sh full "$dir" >/dev/null 2>&1 ;;
    anchors)
      PROBE="${PROBE:-$RESULTS/headstart/headstart.json}" ANCHORS_TIMEOUT="${ANCHORS_TIMEOUT:-$(( budget * 7 / 10 ))}" \
        OUTSIDE_TIMEOUT="${OUTSIDE_TIMEOUT:-$(( budget * 25 / 100 ))}" \
        timeout -k 10 "$budget" bash benchmarks/harness/gpu/anchors_h200.sh "$dir" >/dev/null 2>&1 ;;
    compiled)
      RUN_TIMEOUT=$(( budget / 2 > 120 ? budget / 2 : 120 )) timeout -k 10 "$budget" \
        bash benchmarks/harness/gpu/run_h200.sh compiled "$dir" >/dev/null 2>&1 ;;
    kb20)
      RUN_TIMEOUT=$(( budget - 25 )) timeout -k 10 "$budget" bash benchmarks/harness/gpu/run_h200.sh kb20 "$dir" \
        >/dev/null 2>&1 ;;
    kb-l1)
      K="${KB_K:-reference-aa}" RUN_TIMEOUT=$(( budget - 25 )) timeout -k 10 "$budget" \
        bash benchmarks/harness/gpu/run_h200.sh kb-l1 "$dir" >/dev/null 2>&1 ;;
    *) note "unknown phase $phase" ;;
  esac
  note "end $phase rc=$?"
  pack
done
note "done"
pack
cat "$RESULTS/phases.txt"
for f in "$RESULTS"/*/log.txt; do [ -f "$f" ] && { echo "== $f"; tail -25 "$f"; }; done
