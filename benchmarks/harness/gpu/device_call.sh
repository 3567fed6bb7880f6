#!/usr/bin/env bash
# Several measuring phases in ONE device call, within one time budget, everything packed as it goes:
#
#   BUDGET=570 bash benchmarks/harness/gpu/device_call.sh jail suite kb-l1
#   KB_K="19_ReLU or 88_" bash benchmarks/harness/gpu/device_call.sh kb-l1:150 jail    # PHASE:SECONDS caps a phase
#
# Phases: units, jail, suite (run_h200.sh full: the bundled suite + A/A yardsticks + do_bench), remeasure,
# anchors (anchors_h200.sh: every anchor, do_bench and KernelBench-style means beside each), kb-l1 (KernelBench
# Level 1 at published sizes in A/A: run_h200.sh kb-l1, given whatever time is left; KB_DONE skips earlier items).
# Each phase writes under $WORK/<phase>/; after each one, $WORK is packed into $OUT/results.tgz (a device call
# returns at most 8 files, so one archive), and a phase that would start with less than MIN_PHASE seconds left
# is skipped. A phase's own limit is what remains of BUDGET (seconds from this script's start) less a margin for
# the packing; a phase cut short keeps what it wrote (run_h200.sh and anchors_h200.sh write as they go).
set -u -o pipefail
BUDGET="${BUDGET:-570}"
MIN_PHASE="${MIN_PHASE:-45}"
OUT="${OUT:-/tmp/device-out}"
WORK="${WORK:-/tmp/device-work}"
mkdir -p "$OUT" "$WORK"
T0=$(date +%s)
left() { echo $(( BUDGET - ($(date +%s) - T0) - 15 )); }
pack() { tar czf "$OUT/results.tgz.tmp" -C "$WORK" . 2>/dev/null && mv "$OUT/results.tgz.tmp" "$OUT/results.tgz"; }
note() { echo "[device_call $(( $(date +%s) - T0 ))s] $*" | tee -a "$WORK/phases.txt"; }
[ -f pyproject.toml ] && [ -d pytest_autotune ] || { echo "run from the repository root" >&2; exit 2; }
{
  echo "git=$(git rev-parse HEAD 2>/dev/null) dirty=$(git status --porcelain 2>/dev/null | wc -l) phases=$*"
  nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv 2>&1
} >>"$WORK/phases.txt"
for spec in "$@"; do
  phase="${spec%%:*}"
  budget=$(left)
  if [ "$spec" != "$phase" ] && [ "${spec#*:}" -lt "$budget" ]; then budget="${spec#*:}"; fi  # phase:SECONDS caps it
  if [ "$budget" -lt "$MIN_PHASE" ]; then note "skip $phase: ${budget}s left"; continue; fi
  note "start $phase (limit ${budget}s)"
  mkdir -p "$WORK/$phase"
  case "$phase" in
    units|jail|jail-cuda|remeasure)
      OUT="$WORK/$phase" timeout -k 10 "$budget" bash benchmarks/harness/gpu/run_h200.sh "$phase" >/dev/null 2>&1 ;;
    suite)
      OUT="$WORK/$phase" RUN_TIMEOUT=$(( budget - 60 > 120 ? budget - 60 : 120 )) timeout -k 10 "$budget" \
        bash benchmarks/harness/gpu/run_h200.sh full >/dev/null 2>&1 ;;
    anchors)
      OUT="$WORK/$phase" ANCHORS_TIMEOUT="${ANCHORS_TIMEOUT:-$(( budget * 6 / 10 ))}" \
        OUTSIDE_TIMEOUT="${OUTSIDE_TIMEOUT:-$(( budget * 3 / 10 ))}" \
        timeout -k 10 "$budget" bash benchmarks/harness/gpu/anchors_h200.sh >/dev/null 2>&1 ;;
    kb-l1)
      OUT="$WORK/$phase" K="${KB_K:-reference-aa}" RUN_TIMEOUT=$(( budget - 25 )) timeout -k 10 "$budget" \
        bash benchmarks/harness/gpu/run_h200.sh kb-l1 >/dev/null 2>&1 ;;
    *) note "unknown phase $phase" ;;
  esac
  note "end $phase rc=$?"
  pack
done
note "done"
pack
cat "$WORK/phases.txt"
for f in "$WORK"/*/log.txt; do [ -f "$f" ] && { echo "== $f"; tail -25 "$f"; }; done
