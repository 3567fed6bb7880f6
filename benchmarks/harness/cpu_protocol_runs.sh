#!/usr/bin/env bash
# The CPU measurements of a protocol version, one after the other on an otherwise idle machine, each into OUT as it
# finishes (a later step failing leaves the earlier ones): the main job, the k-invariance benchmark over the bundled
# suite, the short-call and KernelBench v0 A/A, the sample-regime probe and the answer-cache candidates of 02_relu.
#
#   bash benchmarks/harness/cpu_protocol_runs.sh docs/data/cpu-protocol9-vm-2026-12-05 [STEP ...]
#
# STEP: main, k, aa-short, aa-kb, regime, cache, pairs (default: all but pairs, in that order; pairs runs the main
# job with the --autotune-max-pairs its precision line suggested: PAIRS=N, or read from OUT/main-job.json). aa-kb
# needs KernelBench v0 staged in .kb-v0/ (bash benchmarks/harness/kb_v0_stage.sh <KernelBench repo>).
# SELECT="EXPR": main and pairs time only the items pytest's -k EXPR selects.
set -uo pipefail
OUT="${1:?an output folder}"
shift
STEPS=("${@:-main k aa-short aa-kb regime cache}")
ROOT="$(git rev-parse --show-toplevel)"
cd "$ROOT"
mkdir -p "$OUT"
PY="${PYTHON:-python3}"
SEL=()
if [ -n "${SELECT:-}" ]; then SEL=(-k "$SELECT"); fi
{ git rev-parse HEAD; git status --short | head -20; date -u +%FT%TZ; uptime; nproc; } > "$OUT/provenance.txt"
for step in ${STEPS[@]}; do
  t0=$(date +%s)
  case "$step" in
    main)
      /usr/bin/time -f "wall %e s" "$PY" -m pytest --autotune --autotune-json="$OUT/main-job.json" \
        --autotune-db="$OUT/main-job.db" -p no:cacheprovider "${SEL[@]}" > "$OUT/main-job.log" 2>&1 ;;
    k)
      "$PY" benchmarks/harness/k_invariance.py --legs protocol,1,x2,x4 --judged protocol,x2,x4 \
        --out "$OUT/k-invariance" -- --autotune-pairs=6 > "$OUT/k-invariance.md" 2> "$OUT/k-invariance.log" ;;
    aa-short)
      "$PY" benchmarks/harness/bench_harness.py aa --repeats 1 --out "$OUT/aa-short-calls.json" -- \
        --problems=benchmarks/harness/short_calls benchmarks/harness/short_calls > "$OUT/aa-short-calls.md" 2>&1 ;;
    aa-kb)
      "$PY" benchmarks/harness/bench_harness.py aa --repeats 1 --out "$OUT/aa-kb-v0.json" -- \
        --problems=.kb-v0 .kb-v0 > "$OUT/aa-kb-v0.md" 2>&1 ;;
    regime)
      "$PY" benchmarks/harness/cpu_sample_regime.py --out "$OUT/sample-regime.json" > "$OUT/sample-regime.md" 2>&1 ;;
    cache)
      "$PY" benchmarks/harness/k_invariance.py --legs protocol --repeats 2 --out "$OUT/cache-cheats" -- \
        --candidates=benchmarks/harness/cache_cheats benchmarks/kernels/level1/02_relu.py \
        > "$OUT/cache-cheats.md" 2> "$OUT/cache-cheats.log" ;;
    pairs)
      N="${PAIRS:-$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['summary']['precision']['suggested'])" "$OUT/main-job.json")}"
      /usr/bin/time -f "wall %e s" "$PY" -m pytest --autotune --autotune-max-pairs="$N" \
        --autotune-json="$OUT/max-pairs-$N.json" --autotune-db="$OUT/max-pairs-$N.db" -p no:cacheprovider \
        "${SEL[@]}" > "$OUT/max-pairs-$N.log" 2>&1 ;;
    *) echo "unknown step $step" >&2; exit 2 ;;
  esac
  echo "$step: exit $? in $(( $(date +%s) - t0 )) s" | tee -a "$OUT/steps.txt"
done
