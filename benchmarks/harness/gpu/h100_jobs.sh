#!/usr/bin/env bash
# Ten-minute jobs on one 80 GB H100 (16 cores; an H200 runs them the same), each writing under OUT as it goes:
#
#   bash benchmarks/harness/gpu/h100_jobs.sh anchors OUT             # both A/A yardsticks and the nine anchors through
#                                                                    # the plugin, then do_bench of the same modules
#   bash benchmarks/harness/gpu/h100_jobs.sh anchors OUT --shard 1/2 # the yardsticks and five anchors; 2/2: the other four
#   bash benchmarks/harness/gpu/h100_jobs.sh anchors OUT --only "19_ReLU 25_Swish"  # those anchors alone
#   bash benchmarks/harness/gpu/h100_jobs.sh kb-l1 OUT --shard 1/2   # KernelBench Level 1 at published sizes in A/A:
#                                                                    # problems 1, 3, 5, ... (2/2: 2, 4, 6, ...)
#   bash benchmarks/harness/gpu/h100_jobs.sh cheats OUT              # the cheat catalog's GPU cheats (KernelBench's
#                                                                    # adversarial CUDA C++ kernels among them)
#
# anchors: one pytest session (`--autotune --autotune-aa --device=cuda`) over the two yardsticks
# (benchmarks/harness/gpu/problems, their reference-aa items) and the anchors' torch_compile items, in the order that
# matters most first (36, 39, 47: out of memory on the H100 under protocol 9; 88, 40: the sample's length; then 63,
# 19, 23, 25), cut (SIGINT: the finished items' report is still written) early enough to leave do_bench
# (outside_timers.py dobench --all) ~14 s an anchor; then `autotune anchors` (verdicts), anchor_gap.py (ours against
# do_bench per arm and sample) and summary.md. All nine anchors took ~50 s each on the H200 under protocol 6: the
# whole job is close to ten minutes, so an anchor the cut leaves is named in summary.md with the command that runs it
# (`--shard 1/2` and `2/2` always fit). kb-l1: the shard's problems (kb_level1.py choose --shard), `-k reference-aa`,
# each finished item appended to kb-l1.partial.jsonl; kb_level1.py summarize writes summary.md (accepted, CIs holding
# 1.0, median |1 - r|, out of memory). KB_DONE="FILE..." skips the items earlier partial files hold (copy one out of
# an earlier results.tgz into the repository, e.g. .kb-done/, and copy it to the GPU host with it).
#
# OUT holds four files, refreshed after every step (few files: a small folder to copy back): log.txt, phases.txt,
# summary.md and results.tgz (everything: reports, partial JSONL files, the store, do_bench, the anchor gap, jail
# facts). The work itself is under /tmp/h100-jobs. Staged beside the repository (ignored by git; copy them to the
# GPU host with it):
# .whl/ (bash benchmarks/harness/gpu/fetch_wheels.sh: sqlite-utils, the seccomp bindings, nvidia-ml-py) and, for
# kb-l1, .kb-level1/ (python3 benchmarks/harness/gpu/kb_level1.py stage --kernelbench <KernelBench checkout>).
# BUDGET (seconds from the start, default 570) bounds the job; ALLOW_UNSTAGED=1 runs without the wheels (a jail
# weaker than the protocol's is announced in log.txt, as run_h200.sh does); DEVICE=cpu runs the same steps on the
# CPU (the anchors at their dry-run sizes: a check of the script, not a measurement); KB_DIR: another folder of
# staged problems than .kb-level1 (the same check, with small ones).
set -u -o pipefail
MODE="${1:-}"
OUTDIR="${2:-${OUT:-}}"
shift 2 2>/dev/null || true
SHARD=""
ONLY=""
while [ $# -gt 0 ]; do
  case "$1" in
    --shard) SHARD="${2:-}"; shift 2 ;;
    --shard=*) SHARD="${1#--shard=}"; shift ;;
    --only) ONLY="${2:-}"; shift 2 ;;
    *) echo "h100_jobs.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
case "$MODE" in anchors|kb-l1|cheats) ;; *) echo "usage: h100_jobs.sh anchors|kb-l1|cheats OUT [--shard I/N]" >&2; exit 2 ;; esac
[ -n "$OUTDIR" ] || { echo "h100_jobs.sh: name OUT (or set \$OUT)" >&2; exit 2; }
[ "$MODE" != kb-l1 ] || [ -n "$SHARD" ] || { echo "h100_jobs.sh kb-l1: give --shard I/N (1/2 and 2/2: all 100)" >&2; exit 2; }
[ -f pyproject.toml ] && [ -d pytest_autotune ] || { echo "run from the repository root" >&2; exit 2; }
BUDGET="${BUDGET:-570}"
T0=$(date +%s)
OUTDIR="$(realpath -m "$OUTDIR")"
W=/tmp/h100-jobs/$MODE${SHARD:+-${SHARD/\//of}}
rm -rf "$W"
mkdir -p "$W" "$OUTDIR"
LOG="$W/log.txt"
HERE=benchmarks/harness/gpu
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

elapsed() { echo $(( $(date +%s) - T0 )); }
left() { echo $(( BUDGET - $(elapsed) )); }
say() { echo "[$(elapsed)s] $*" | tee -a "$LOG" >>"$W/phases.txt"; echo "[$(elapsed)s] $*"; }
pack() {  # everything so far into OUT, four files
  tar czf "$OUTDIR/results.tgz.tmp" -C "$W" . 2>/dev/null && mv "$OUTDIR/results.tgz.tmp" "$OUTDIR/results.tgz"
  cp "$LOG" "$OUTDIR/log.txt" 2>/dev/null
  cp "$W/phases.txt" "$OUTDIR/phases.txt" 2>/dev/null
  [ -f "$W/summary.md" ] && cp "$W/summary.md" "$OUTDIR/summary.md"
  return 0
}
step() {  # step SECONDS COMMAND...: run with a limit (SIGINT first: pytest still writes its report), log, pack
  local limit="$1"; shift
  if [ "$limit" -lt 5 ]; then say "skipped (no time left): $*"; return 124; fi
  say "\$ $* (limit ${limit}s)"
  timeout -k 15 -s INT "$limit" "$@" >>"$LOG" 2>&1
  local rc=$?
  say "  -> rc=$rc"
  pack
  return $rc
}

{
  echo "mode=$MODE shard=${SHARD:-all} date=$(date -u +%Y-%m-%dT%H:%M:%SZ) git=$(git rev-parse HEAD 2>/dev/null) dirty=$(git status --porcelain 2>/dev/null | wc -l) budget=${BUDGET}s"
  nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version,clocks.max.sm,power.limit --format=csv 2>&1
  nproc
} >>"$W/phases.txt" 2>&1
cat "$W/phases.txt" >>"$LOG"

# ---- install: the wheels copied along in .whl/, then the project (editable: its pytest11 entry point registered)
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$PWD/.site" .whl/*.whl \
    >>"$LOG" 2>&1 || say "wheel install failed"
  export PYTHONPATH="$PWD/.site:$PWD:$PWD/$HERE${PYTHONPATH:+:$PYTHONPATH}"
else
  export PYTHONPATH="$PWD:$PWD/$HERE${PYTHONPATH:+:$PYTHONPATH}"
fi
python3 -m pip install -q --no-deps --no-index --no-build-isolation -e . >>"$LOG" 2>&1 || say "editable install failed"
PLUGIN=()
python3 -c 'import importlib.metadata as m, sys; sys.exit(0 if any(e.name == "autotune" for e in m.entry_points(group="pytest11")) else 1)' \
  2>/dev/null || PLUGIN=(-p pytest_autotune.plugin)
python3 -c "import sys, torch, triton; print(sys.version.split()[0], 'torch', torch.__version__, torch.version.cuda, 'triton', triton.__version__, 'gpus', torch.cuda.device_count())" >>"$W/phases.txt" 2>&1

# ---- the jail these measurements get, against what the protocol asks (run_h200.sh's gate)
timeout 90 python3 "$HERE/jail_facts.py" --gate --json "$W/jail_facts.json" >>"$LOG" 2>&1
GATE=$?
grep -E "^jail on this host" "$LOG" | tail -1 | tee -a "$W/phases.txt"
if [ "$GATE" = 4 ] && [ "${ALLOW_UNSTAGED:-0}" != 1 ]; then
  say "REFUSED: not staged (bash $HERE/fetch_wheels.sh, then copy .whl/ to the GPU host); ALLOW_UNSTAGED=1 to go on"; pack; exit 4
elif [ "$GATE" != 0 ]; then
  say "WARNING: the sandbox jail here is weaker than the protocol asks (gate rc=$GATE): see log.txt"
fi
pack
PYT=(python3 -m pytest "${PLUGIN[@]}" -p harness_plugin -p no:cacheprovider --device="${DEVICE:-cuda}" -q -rA --autotune
     --autotune-aa)

if [ "$MODE" = anchors ]; then
  ORDER=(36_RMSNorm_ 39_L2Norm_ 47_Sum_reduction_over_a_dimension 88_MinGPTNewGelu 40_LayerNorm
         63_conv_standard_2D__square_input__square_kernel 19_ReLU 23_Softmax 25_Swish)
  I=1; N=1
  if [ -n "$SHARD" ]; then I="${SHARD%/*}"; N="${SHARD#*/}"; fi
  PICK=(); FILES=()
  for j in "${!ORDER[@]}"; do
    if [ -n "$ONLY" ]; then case " $ONLY " in *" ${ORDER[$j]} "*) ;; *) continue ;; esac
    elif [ $(( j % N )) -ne $(( I - 1 )) ]; then continue; fi
    PICK+=("${ORDER[$j]}"); FILES+=("benchmarks/kernels/anchors/${ORDER[$j]}.py")
  done
  YARD=$([ "$I" = 1 ] && [ -z "$ONLY" ] && echo both || echo none)
  SELECT=(-k torch_compile)
  if [ "$YARD" = both ]; then
    FILES=("$HERE/problems/aa_relu_4us.py" "$HERE/problems/aa_relu_130us.py" "${FILES[@]}")
    SELECT=(--problems="$HERE/problems" -k "aa_relu or torch_compile")
  fi
  say "anchors: ${PICK[*]} (shard ${SHARD:-all}${ONLY:+, --only}); yardsticks: $YARD"
  RESERVE=$(( 14 * ${#PICK[@]} + 20 ))  # do_bench of each anchor (eager and compiled, compiled again) and the rest
  AUTOTUNE_PARTIAL="$W/anchors.partial.jsonl" step $(( $(left) - RESERVE )) "${PYT[@]}" "${SELECT[@]}" \
    --autotune-db="$W/anchors.db" --autotune-json="$W/anchors.json" "${FILES[@]}"
  step 30 python3 -m pytest_autotune.cli anchors --db "$W/anchors.db" --json "$W/verdicts.json"
  if [ -f "$W/anchors.json" ]; then
    step $(( $(left) - 15 )) python3 "$HERE/outside_timers.py" dobench --all --report "$W/anchors.json" \
      --out "$W/outside.json"
    [ -f "$W/outside.json" ] || cp "$W/outside.json.partial" "$W/outside.json" 2>/dev/null
    [ -f "$W/outside.json" ] && python3 "$HERE/anchor_gap.py" --pair "$W/anchors.json" "$W/outside.json" \
      --json "$W/anchor-gap.json" >"$W/anchor-gap.md" 2>>"$LOG"
  fi
  python3 "$HERE/h100_summary.py" anchors "$W" --expect "${PICK[@]}" >"$W/summary.md" 2>>"$LOG"
elif [ "$MODE" = cheats ]; then
  # every GPU cheat with its honest companion in one session, KernelBench's adversarial CUDA C++ kernels among them
  # (nvcc: ~70 s a build): the verdicts must be protocol 9's; then the compiled candidates' build test, if time is left
  step $(( $(left) - 15 )) python3 -m pytest -p no:cacheprovider -q -rs tests/test_cheat_catalog.py -k gpu_cheat -s \
    --junitxml="$W/gpu_cheats.xml"
  step $(( $(left) - 15 )) python3 -m pytest -p no:cacheprovider -q -rs tests/test_build_e2e.py -k cuda_and_triton \
    --junitxml="$W/compiled_build.xml"
  grep -hE "^(FAILED|ERROR|PASSED)|passed|failed" "$LOG" | tail -20 >"$W/summary.md"
else
  KB="${KB_DIR:-.kb-level1}"
  python3 "$HERE/kb_level1.py" choose --shard "$SHARD" --dir "$KB" --json "$W/selection.json" >>"$LOG" 2>&1 \
    || { say "no .kb-level1/: run kb_level1.py stage --kernelbench <checkout>, copy .kb-level1 to the GPU host"; pack; exit 2; }
  CHOSEN="$(python3 -c 'import json,sys; print(" ".join(json.load(open(sys.argv[1]))["problems"]))' "$W/selection.json")"
  say "kb-l1 shard $SHARD: $(echo "$CHOSEN" | wc -w) problems"
  AUTOTUNE_ONLY_PROBLEMS="$CHOSEN" AUTOTUNE_SKIP_DONE="${KB_DONE:-} $W/kb-l1.partial.jsonl" \
    AUTOTUNE_PARTIAL="$W/kb-l1.partial.jsonl" step $(( $(left) - 20 )) "${PYT[@]}" --problems="$KB" \
    --autotune-db="$W/kb-l1.db" --autotune-json="$W/kb-l1.json" -k reference-aa "$KB"
  python3 "$HERE/kb_level1.py" summarize ${KB_DONE:-} "$W/kb-l1.partial.jsonl" --md "$W/kb-l1.md" \
    --json "$W/kb-l1-summary.json" >>"$LOG" 2>&1
  python3 "$HERE/h100_summary.py" kb-l1 "$W" --expect $CHOSEN ${KB_DONE:+--done $KB_DONE} >"$W/summary.md" 2>>"$LOG"
fi
say "done"
pack
cat "$W/summary.md" 2>/dev/null | head -40
