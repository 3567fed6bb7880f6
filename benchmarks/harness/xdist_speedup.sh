#!/usr/bin/env bash
# Wall time of a correctness-only run of the bundled suite with -n 0 and -n 2 (three runs each, alternating).
#   bash benchmarks/harness/xdist_speedup.sh [extra pytest args]
set -euo pipefail
cd "$(dirname "$0")/../.."
for i in 1 2 3; do
  for n in 0 2; do
    t0=$(date +%s.%N)
    python -m pytest -q -p no:cacheprovider -n "$n" "$@" > /tmp/xdist_speedup_n$n.log 2>&1 || true
    t1=$(date +%s.%N)
    echo "run $i -n $n: $(echo "$t1 - $t0" | bc) s  ($(tail -1 /tmp/xdist_speedup_n$n.log))"
  done
done
