#!/usr/bin/env bash
# Fixed against fresh placements of the CPU timing rounds' data (docs/design/protocol.md#fresh-placements):
# A/A sessions of the short-call files, alternating the two settings, in a worktree of HEAD whose protocol.toml is
# changed only by the knobs below (an unfrozen version, so the sessions run --autotune-exploratory).
#
#   bash benchmarks/harness/cpu_placement_ab.sh OUT_DIR [REPEATS] [PAIRS] [BUDGET_S] ["SPAN_KIB ..."]
#
# The settings (default "0 1024": fixed, and fresh placements over 1-2 MiB) run in a rotating order, one session
# each per repeat. A span of a few KiB keeps the placement nearly fixed but still prefaults the heap, which
# separates the page faults that land in samples from where the data lands.
# Each session: bench_harness.py aa over benchmarks/harness/short_calls (14 KernelBench-sized elementwise files);
# OUT_DIR/span<S>-r<i>.json holds its summary (median |log|, CI coverage and width, the pairs of processes' spread).
set -euo pipefail
OUT="$(realpath -m "${1:?OUT_DIR}")"; REPEATS="${2:-2}"; PAIRS="${3:-2}"; BUDGET="${4:-4.0}"; SPANS=(${5:-0 1024})
ROOT="$(git rev-parse --show-toplevel)"
WT="$(mktemp -d /tmp/placement-ab.XXXXXX)"
git -C "$ROOT" worktree add -q --detach "$WT" HEAD
trap 'git -C "$ROOT" worktree remove --force "$WT"' EXIT
mkdir -p "$OUT"
n=${#SPANS[@]}
for i in $(seq 1 "$REPEATS"); do
  for j in $(seq 0 $(( n - 1 ))); do
    span=${SPANS[$(( (i - 1 + j) % n ))]}  # each repeat starts one setting later
    sed -e 's/^version = .*/version = "placement-ab"/' -e "s/^process_pairs = [0-9]* /process_pairs = $PAIRS /" \
        -e "s/^item_budget_s = [0-9.]* /item_budget_s = $BUDGET /" \
        -e "s/^cache_flush_factor = /placement_span_kib = $span\ncache_flush_factor = /" \
        "$ROOT/protocol.toml" > "$WT/protocol.toml"
    echo "== repeat $i, placement_span_kib = $span ($(date -u +%H:%M:%S), load $(cut -d' ' -f1-3 /proc/loadavg))"
    (cd "$WT" && python3 benchmarks/harness/bench_harness.py aa --repeats 1 --out "$OUT/span$span-r$i.json" -- \
      --problems=benchmarks/harness/short_calls benchmarks/harness/short_calls --autotune-exploratory) | tail -4
  done
done
