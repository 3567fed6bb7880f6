#!/usr/bin/env bash
# The external anchors (benchmarks/kernels/anchors, docs/guide/anchors.md) on a CUDA GPU, in ONE run, with triton's
# do_bench of the same eager and compiled modules beside each:
#
#   bash benchmarks/harness/gpu/anchors_h200.sh [OUT_DIR]                      # every anchor (default /tmp/anchors-out)
#   ANCHORS_K="LayerNorm or MinGPT" bash benchmarks/harness/gpu/anchors_h200.sh OUT_DIR   # a subset (pytest -k)
#
# Run from the root of any copy of the repository, with the anchors.toml committed (the plugin checks with git that
# each anchor's mechanism was committed before its first measurement; uncommitted, a divergence can only read
# "unexplained"), staged like run_h200.sh (fetch_wheels.sh, then copy `.whl/` to the GPU host). Everything lands in
# OUT_DIR as it is produced: log.txt, anchors.json (the pytest report; anchors.partial.jsonl item by item), anchors.db
# (the store), verdicts.json (autotune anchors), plots/, outside.json (do_bench and the KernelBench-style mean beside
# each anchor), anchor-gap.md (anchor_gap.py: ours against do_bench, and where the head start's time went).
# Knobs: ANCHORS_K, ANCHORS_TIMEOUT (seconds, default 540; SIGINT ends the run and the report of the finished items
# is still written), OUTSIDE_TIMEOUT, SKIP_OUTSIDE=1, EXTRA_PYTEST; ALLOW_UNSTAGED=1 and REQUIRE_FULL_JAIL=1 as in
# run_h200.sh (the jail gate: refuse an unstaged run, warn loudly of a weaker jail).
set -u -o pipefail
RESULTS="$(realpath -m "${1:-/tmp/anchors-out}")"
mkdir -p "$RESULTS"
LOG="$RESULTS/log.txt"
T0=$(date +%s)
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
say() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a "$LOG"; }
[ -f pyproject.toml ] && [ -d pytest_autotune ] || { echo "run from the repository root" >&2; exit 2; }
if ls .whl/*.whl >/dev/null 2>&1; then  # the same wheel carrier as run_h200.sh (benchmarks/harness/gpu/fetch_wheels.sh)
  # into the checkout, not /tmp: every sandbox has a private /tmp, the checkout it sees read-only
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$PWD/.site" \
    .whl/*.whl >>"$LOG" 2>&1 || { say "wheel install failed"; tail -20 "$LOG"; exit 1; }
  export PYTHONPATH="$PWD/.site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
else
  export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
fi
# the jail these measurements get, against what the protocol asks (the same gate as run_h200.sh)
python3 benchmarks/harness/gpu/jail_facts.py --gate >>"$LOG" 2>&1
GATE=$?
grep -E "^jail on this host" "$LOG" | tail -1
if [ "$GATE" = 4 ] && [ "${ALLOW_UNSTAGED:-0}" != 1 ]; then
  say "REFUSED: not staged (bash benchmarks/harness/gpu/fetch_wheels.sh, then copy .whl/ to the GPU host); ALLOW_UNSTAGED=1 to go on"
  exit 4
elif [ "$GATE" != 0 ]; then
  sed -n '/^=====/,/^=====/p' "$LOG" | tail -30 | tee "$RESULTS/JAIL-WEAKER-THAN-PROTOCOL.txt"
  say "WARNING: the sandbox jail here is weaker than the protocol asks (gate rc=$GATE): see above"
  if [ "${REQUIRE_FULL_JAIL:-0}" = 1 ]; then say "REFUSED (REQUIRE_FULL_JAIL=1)"; exit 3; fi
fi
PLUGIN=()
python3 -c 'import importlib.metadata as m, sys; sys.exit(0 if any(e.name == "autotune" for e in m.entry_points(group="pytest11")) else 1)' \
  2>/dev/null || PLUGIN=(-p pytest_autotune.plugin)
{
  echo "date=$(date -u +%Y-%m-%dT%H:%M:%SZ) host=$(hostname) git=$(git rev-parse HEAD 2>/dev/null) dirty=$(git status --porcelain 2>/dev/null | wc -l)"
  git log -1 --format='anchors.toml last committed: %h %ci' -- benchmarks/kernels/anchors/anchors.toml 2>&1
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem,power.limit --format=csv 2>&1
  python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)" 2>&1
  free -g | head -2
} | tee -a "$LOG"
say "anchors: pytest --autotune -m anchor --device=cuda ${ANCHORS_K:+-k \"$ANCHORS_K\"}"
PYTHONPATH="$PWD/benchmarks/harness/gpu:$PYTHONPATH" AUTOTUNE_PARTIAL="$RESULTS/anchors.partial.jsonl" \
  timeout -s INT "${ANCHORS_TIMEOUT:-540}" python3 -m pytest "${PLUGIN[@]}" -p harness_plugin -p no:cacheprovider --autotune -m anchor \
  --device=cuda ${ANCHORS_K:+-k "$ANCHORS_K"} --autotune-db="$RESULTS/anchors.db" --autotune-json="$RESULTS/anchors.json" \
  --autotune-plots="$RESULTS/plots" -rA ${EXTRA_PYTEST:-} benchmarks/kernels/anchors >>"$LOG" 2>&1
say "pytest rc=$?"
python3 -m pytest_autotune.cli anchors --db "$RESULTS/anchors.db" --json "$RESULTS/verdicts.json" 2>&1 | tee -a "$LOG"
# the outside references, in the same run, beside every anchor (measured or not): triton's do_bench median and
# KernelBench's own way (mean of 100 trials after a 256 MiB fill), each eager vs compiled in the order
# base, cand, cand, base (outside_timers.py)
if [ "${SKIP_OUTSIDE:-0}" != 1 ] && [ -f "$RESULTS/anchors.json" ]; then
  say "outside references: do_bench median and the KernelBench-style mean of 100 trials"
  timeout "${OUTSIDE_TIMEOUT:-300}" python3 benchmarks/harness/gpu/outside_timers.py dobench --all --kb-mean \
    --report "$RESULTS/anchors.json" --out "$RESULTS/outside.json" >>"$LOG" 2>&1
  say "outside rc=$?"
  grep -E "^dobench " "$LOG" | tail -12
fi
if [ -f "$RESULTS/outside.json" ] && [ -f "$RESULTS/anchors.json" ]; then
  python3 benchmarks/harness/gpu/anchor_gap.py --pair "$RESULTS/anchors.json" "$RESULTS/outside.json" \
    ${PROBE:+--probe "$PROBE"} --json "$RESULTS/anchor-gap.json" > "$RESULTS/anchor-gap.md" 2>>"$LOG"
  cat "$RESULTS/anchor-gap.md" | tee -a "$LOG"
fi
sed -n '/pytest-autotune:/,$p' "$LOG" | tail -40
