#!/usr/bin/env bash
# Measure pytest-autotune on a CUDA GPU (written for the project's H200 device machine) in ONE invocation.
#
#   bash benchmarks/harness/gpu/run_h200.sh smoke   # ~3 min: install, nvidia-smi, CUDA unit tests,
#                                                   #   correctness-only -k relu, one timed item, outside timers
#   bash benchmarks/harness/gpu/run_h200.sh full    # suite + A/A items twice (re-measure), do_bench on the same
#                                                   #   pairs, naive back-to-back A/A, timing modes, summary
#   bash benchmarks/harness/gpu/run_h200.sh xdist   # -n 2 on a few items: each worker on its own GPU?
#
# Run from the repository root. Wheels of missing packages (sqlite-utils and its deps) are taken from .whl/
# if present. Everything lands in $OUT (default /tmp/h200-out): at most 8 files, the summary table last on
# stdout. Knobs (environment): PYTEST_AUTOTUNE_BUDGET_SCALE (per-item timing budget scale, default 0.5 in
# full), RUN1_K / RUN2_K (pytest -k expressions), RUN1_TIMEOUT / RUN2_TIMEOUT (seconds; SIGINT ends the run
# and the JSON report is still written), SKIP_RUN2=1, EXTRA_PYTEST (more pytest options).
set -u -o pipefail
MODE="${1:-full}"
OUT="${OUT:-/tmp/h200-out}"
W="${WORKDIR:-/tmp/h200-work}"
mkdir -p "$OUT" "$W"
LOG="$OUT/log.txt"
HERE="benchmarks/harness/gpu"
T0=$(date +%s)
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
# NVLink multicast stays off on the multi-GPU machines (and is harmless elsewhere)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

say() { echo "[$(( $(date +%s) - T0 ))s $(date -u +%H:%M:%S)] $*" | tee -a "$LOG"; }
run() { say "\$ $*"; "$@" >>"$LOG" 2>&1; local rc=$?; say "  -> rc=$rc"; return $rc; }

[ -f pyproject.toml ] && [ -d pytest_autotune ] || { echo "run from the repository root" >&2; exit 2; }

# ---- install what is missing (wheels carried in .whl/), make the repo importable
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    >>"$LOG" 2>&1 || { say "wheel install failed"; tail -20 "$LOG"; exit 1; }
  export PYTHONPATH="/tmp/site:$PWD:$PWD/$HERE${PYTHONPATH:+:$PYTHONPATH}"
else
  export PYTHONPATH="$PWD:$PWD/$HERE${PYTHONPATH:+:$PYTHONPATH}"
fi
PLUGIN=()
if ! python3 - <<'EOF' 2>/dev/null
import importlib.metadata as m, sys
sys.exit(0 if any(e.name == "autotune" for e in m.entry_points(group="pytest11")) else 1)
EOF
then PLUGIN=(-p pytest_autotune.plugin); fi
DEVICE=cuda
python3 -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" || { DEVICE=cpu; say "NO CUDA: dry run on the CPU"; }
PYT=(python3 -m pytest "${PLUGIN[@]}" -p harness_plugin -p no:cacheprovider --device=$DEVICE ${EXTRA_PYTEST:-})
# a timed-out run still leaves its finished items: AUTOTUNE_PARTIAL=<report>.partial.jsonl (summarize.py reads it)
pyt() { local json="$1"; shift; AUTOTUNE_PARTIAL="$W/$(basename "$json" .json).partial.jsonl" run "$@" --autotune-json="$json"; }

{
  echo "mode=$MODE device=$DEVICE date=$(date -u +%Y-%m-%dT%H:%M:%SZ) host=$(hostname)"
  echo "git: $(git rev-parse HEAD 2>/dev/null) dirty files: $(git status --porcelain 2>/dev/null | wc -l)"
  git status --porcelain 2>/dev/null | head -40
  nvidia-smi 2>&1 | head -30
  nvidia-smi --query-gpu=index,name,uuid,pci.bus_id,driver_version,clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem,power.limit,temperature.gpu,persistence_mode,compute_mode --format=csv 2>&1
  python3 -c "import sys, torch, numpy, pytest, hypothesis, sqlite_utils; print(sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'numpy', numpy.__version__, 'pytest', pytest.__version__, 'hypothesis', hypothesis.__version__, 'sqlite_utils ok')" 2>&1
  python3 -c "import triton; print('triton', triton.__version__)" 2>&1
  python3 -c "import torch, time; torch.set_num_threads(1); t = time.perf_counter(); torch.randn(8192, 16384); print(f'cpu randn of 8192x16384 on 1 thread: {time.perf_counter() - t:.2f} s (inputs are drawn on the CPU)')" 2>&1
  python3 -c "import pytest_autotune.plugin, pytest_autotune.measure.devices.cuda as c; print('plugin imports; cuda device:', c.CudaDevice.unavailable_reason() or 'available')" 2>&1
} >>"$LOG" 2>&1
say "environment logged ($DEVICE, plugin args: ${PLUGIN[*]:-entry point})"

summary() {
  python3 "$HERE/summarize.py" "$OUT" "$W" > "$W/summary.txt" 2>>"$LOG"; local rc=$?
  say "summary rc=$rc; total $(( $(date +%s) - T0 )) s"
  cat "$W/summary.txt"
}

case "$MODE" in
smoke)
  run python3 -m pytest -p no:cacheprovider -q -rs tests/test_cuda_device.py
  pyt "$OUT/correctness.json" timeout -k 20 -s INT 240 "${PYT[@]}" -q -k "02_relu"
  export PYTEST_AUTOTUNE_BUDGET_SCALE="${PYTEST_AUTOTUNE_BUDGET_SCALE:-0.5}"
  pyt "$OUT/run1.json" timeout -k 20 -s INT 240 "${PYT[@]}" -q --autotune --autotune-aa --problems="$HERE/problems" \
    -k "${SMOKE_K:-(02_relu and relu and not aa) or aa_relu_4us}" --autotune-db="$W/h200.db"
  run timeout 120 python3 "$HERE/outside_timers.py" dobench --report "$OUT/run1.json" --out "$OUT/dobench.json"
  run timeout 120 python3 "$HERE/outside_timers.py" naive --problems "$HERE/problems" --out "$OUT/naive.json" --trials 5
  run timeout 120 python3 "$HERE/outside_timers.py" mode --problems "$HERE/problems" --out "$OUT/mode.json"
  grep -E "passed|failed|error|PASS|FAIL|SKIP|accepted|rejected|Error|speedup" "$LOG" | tail -40
  summary
  ;;
full)
  export PYTEST_AUTOTUNE_BUDGET_SCALE="${PYTEST_AUTOTUNE_BUDGET_SCALE:-0.5}"
  say "budget scale $PYTEST_AUTOTUNE_BUDGET_SCALE"
  run timeout 120 python3 -m pytest -p no:cacheprovider -q -rs tests/test_cuda_device.py
  # RUN_PATHS: problem files in the order they should run (a run cut by its timeout keeps what it finished)
  read -r -a PATHS <<< "${RUN_PATHS:-}"
  pyt "$OUT/run1.json" timeout -k 20 -s INT "${RUN1_TIMEOUT:-330}" "${PYT[@]}" -q --autotune --autotune-aa \
    --problems="$HERE/problems" ${RUN1_K:+-k "$RUN1_K"} --autotune-db="$W/h200.db" "${PATHS[@]}"
  tail -45 "$LOG" | grep -vE "^\s*$" | tail -40
  if [ "${SKIP_RUN2:-0}" != 1 ]; then
    K2="${RUN2_K:-${RUN1_K:-}}"
    pyt "$OUT/run2.json" timeout -k 20 -s INT "${RUN2_TIMEOUT:-200}" "${PYT[@]}" -q --autotune --autotune-aa \
      --problems="$HERE/problems" ${K2:+-k "$K2"} --autotune-db="$W/h200.db" "${PATHS[@]}"
  fi
  run timeout 120 python3 "$HERE/outside_timers.py" dobench --report "$OUT/run1.json" --out "$OUT/dobench.json"
  run timeout 60 python3 "$HERE/outside_timers.py" naive --problems "$HERE/problems" --out "$OUT/naive.json"
  run timeout 60 python3 "$HERE/outside_timers.py" mode --problems "$HERE/problems" --out "$OUT/mode.json"
  summary
  ;;
xdist)
  export PYTEST_AUTOTUNE_BUDGET_SCALE="${PYTEST_AUTOTUNE_BUDGET_SCALE:-0.25}"
  python3 -c "import torch; print('device_count', torch.cuda.device_count())" 2>&1 | tee -a "$LOG"
  ( while true; do nvidia-smi --query-compute-apps=gpu_uuid,pid,used_memory --format=csv,noheader 2>/dev/null; sleep 0.5; done ) \
    > "$OUT/xdist_apps.csv" &
  POLL=$!
  export XDIST_PROBE_DIR="$OUT/xdist"
  pyt "$OUT/xdist.json" timeout -k 20 -s INT "${XDIST_TIMEOUT:-300}" "${PYT[@]}" -q -n 2 --autotune \
    ${XDIST_K:+-k "$XDIST_K"} --autotune-db="$W/h200.db"
  kill "$POLL" 2>/dev/null; wait "$POLL" 2>/dev/null
  summary
  ;;
*)
  echo "unknown mode $MODE (smoke | full | xdist)" >&2; exit 2 ;;
esac
