#!/usr/bin/env bash
# Measure pytest-autotune on a CUDA GPU (written for the project's H200 host), one phase per run:
#
#   bash benchmarks/harness/gpu/run_h200.sh MODE [OUT_DIR]      # results under OUT_DIR (default /tmp/h200-out)
#
#   smoke      ~3 min: CUDA unit tests (IPC included), GPU cheats, one timed item and the 4 us A/A yardstick, jail
#   compiled   the CUDA C++ and Triton candidates: built once, measured, do_bench of the same modules, a second
#              session on the warm build cache; the build tests and the GPU cheats
#   units      the CUDA unit tests alone (IPC, device, head start, outputs by handle)
#   headstart  ~3-4 min: where the compiled arms' fixed cost per sample goes with the head start, outside the
#              sandboxes (head_start_probe.py -> headstart.json): the nine anchors and 09/12, hold off and on,
#              do_bench beside each
#   full       the bundled suite + the two A/A yardsticks in ONE pytest call (run1.json), then triton do_bench on
#              every accepted pair (dobench.json)
#   remeasure  the same pytest call again (run2.json): re-measure agreement, do_bench on its pairs again
#   kb20       20 KernelBench Level-1 problems at published sizes in A/A, drawn by a seed (KB_SEED, else a fresh
#              one) that the log, kb20-selection.json and kb20.md name (.kb-level1 staged: kb_level1.py stage)
#   kb-l1      KernelBench Level 1 at published sizes in A/A (kb_level1.py): KB_DONE skips earlier items
#   cpu-aa     the CPU A/A benchmark on the short-call problems (the host's quiet CPUs)
#   cpu-layout ~1.5 min: where a CPU A/A's per-process offset comes from (cpu_layout_probe.py)
#   aa-spread  GPU cheats, then the 130 us A/A yardstick N times with fresh timing sandboxes and reused ones
#   xdist      two-GPU host: the suite with -n 0, then -n 2, both stores verified, compared by xdist_compare.py
#   jail       < 4 min: the host's jail facts and plan, jail_check (what each namespace/setting costs CUDA), the GPU
#              cheats (helpers on the GPU, second context, fork bomb, memory hog, side stream, persisting L2) and
#              the jail's cheats on CUDA
#
# The anchors have their own script (anchors_h200.sh); phases.sh runs several of these in one go within a time
# budget. Run from the root of any copy of the repository, staged by `bash benchmarks/harness/gpu/fetch_wheels.sh`
# where pip works, then copy `.whl/` to the GPU host with the repository: the wheels the host lacks (sqlite-utils
# and its needs, the seccomp bindings, nvidia-ml-py) are installed from .whl/ into .site/. Before measuring, the jail
# the harness would use here is checked (jail_facts.py --gate): a run that is not staged (no seccomp bindings, no
# sqlite-utils) is REFUSED (ALLOW_UNSTAGED=1 goes on anyway), and a jail weaker than full is announced loudly on
# stdout, in log.txt and in OUT_DIR/JAIL-WEAKER-THAN-PROTOCOL.txt (REQUIRE_FULL_JAIL=1 refuses it). Everything lands
# in OUT_DIR as it is produced, so a run cut short still leaves what it finished (harness_plugin.py appends each item
# to <report>.partial.jsonl). The summary (summarize.py) is printed last; run it on run1.json and run2.json together
# for the re-measure numbers.
# Knobs: RUN_TIMEOUT (seconds for the suite's pytest call, default 470), EXTRA_PYTEST, K (a -k expression),
# SKIP_DOBENCH=1, ROTATE=N (do_bench also on N rotating input sets), KB_SEED and KB_COUNT (kb20), PROBE_SAMPLES and
# PROBE_ONLY (headstart), AA_TIMEOUT and AA_ARGS (cpu-aa's seconds and pytest arguments; default: every problem
# under short_calls/ and the bundled suite, on the CPU); aa-spread's AA_YARDSTICK (aa_relu_130us | aa_relu_4us),
# AA_N (copies), AA_VARIANTS ("fresh same") and SKIP_CHEATS=1.
set -u -o pipefail
MODE="${1:-smoke}"
RESULTS="$(realpath -m "${2:-/tmp/h200-out}")"
mkdir -p "$RESULTS"
LOG="$RESULTS/log.txt"
HERE="benchmarks/harness/gpu"
T0=$(date +%s)
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

say() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a "$LOG"; }
run() { say "\$ $*"; "$@" >>"$LOG" 2>&1; local rc=$?; say "  -> rc=$rc"; return $rc; }

[ -f pyproject.toml ] && [ -d pytest_autotune ] || { echo "run from the repository root" >&2; exit 2; }

# ---- install: the wheels copied along in .whl/, then the project itself (editable, so its pytest11 entry point is registered)
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$PWD/.site" .whl/*.whl \
    >>"$LOG" 2>&1 || say "wheel install failed"
  export PYTHONPATH="$PWD/.site:$PWD:$PWD/$HERE${PYTHONPATH:+:$PYTHONPATH}"
else
  export PYTHONPATH="$PWD:$PWD/$HERE${PYTHONPATH:+:$PYTHONPATH}"
fi
python3 -m pip install -q --no-deps --no-index --no-build-isolation -e . >>"$LOG" 2>&1 || say "editable install failed"
PLUGIN=()
python3 - <<'EOF' 2>/dev/null || PLUGIN=(-p pytest_autotune.plugin)
import importlib.metadata as m, sys
sys.exit(0 if any(e.name == "autotune" for e in m.entry_points(group="pytest11")) else 1)
EOF
{
  echo "mode=$MODE date=$(date -u +%Y-%m-%dT%H:%M:%SZ) git=$(git rev-parse HEAD 2>/dev/null) dirty=$(git status --porcelain 2>/dev/null | wc -l)"
  nvidia-smi --query-gpu=index,name,uuid,driver_version,clocks.sm,clocks.mem,clocks.max.sm,power.limit,temperature.gpu --format=csv 2>&1
  python3 -c "import sys, torch, triton, sqlite_utils, hypothesis; print(sys.version.split()[0], 'torch', torch.__version__, torch.version.cuda, 'triton', triton.__version__, 'gpus', torch.cuda.device_count())" 2>&1
} >>"$LOG" 2>&1
# ---- the jail this run gets, against what the protocol asks
run timeout 90 python3 "$HERE/jail_facts.py" --gate --json "$RESULTS/jail_facts.json"
GATE=$?
grep -E "^jail on this host" "$LOG" | tail -1
if [ "$GATE" = 4 ] && [ "${ALLOW_UNSTAGED:-0}" != 1 ]; then
  sed -n '/^=====/,/^=====/p' "$LOG" | tail -6
  say "REFUSED: not staged (bash benchmarks/harness/gpu/fetch_wheels.sh, then copy .whl/ to the GPU host); ALLOW_UNSTAGED=1 to go on"
  exit 4
elif [ "$GATE" != 0 ]; then
  sed -n '/^=====/,/^=====/p' "$LOG" | tail -30 | tee "$RESULTS/JAIL-WEAKER-THAN-PROTOCOL.txt"
  say "WARNING: the sandbox jail here is weaker than the protocol asks (gate rc=$GATE): see above"
  if [ "${REQUIRE_FULL_JAIL:-0}" = 1 ]; then say "REFUSED (REQUIRE_FULL_JAIL=1)"; exit 3; fi
fi
PYT=(python3 -m pytest "${PLUGIN[@]}" -p harness_plugin -p no:cacheprovider --device=cuda ${EXTRA_PYTEST:-})
suite() {  # suite NAME [pytest args...]: the bundled suite + the two A/A yardsticks in one pytest call
  local name="$1"; shift
  AUTOTUNE_PARTIAL="$RESULTS/$name.partial.jsonl" run timeout -k 20 -s INT "${RUN_TIMEOUT:-470}" "${PYT[@]}" -q \
    --autotune --autotune-aa --problems="$HERE/problems" --autotune-db="/tmp/$name.db" --autotune-json="$RESULTS/$name.json" \
    -k "${K:-not reference-aa or aa_relu}" "$@"
  tail -45 "$LOG" | grep -E "^(problem|[0-9a-z_]+ +[a-z_-]+ +(accepted|rejected|error|quarantined))|accepted [0-9]|passed|failed" | tail -40
}

units_() {
  run timeout "${UNIT_TIMEOUT:-240}" python3 -m pytest -p no:cacheprovider -q -rs tests/test_cuda_device.py \
    tests/test_cuda_head_start.py tests/test_cuda_hold.py tests/test_outputs_by_handle.py -k "not 256_mib" \
    --junitxml="$RESULTS/unit.xml"
  grep -E "passed|failed|error" "$LOG" | tail -3
}
case "$MODE" in
leaderboard)
  # agents' KernelBench Level-1 kernels from the public leaderboard through the gates (docs/guide/contract.md):
  # .lb-suite/ is the import, made where the leaderboard's repository is (`autotune import kernelbench <repo> --out
  # .lb-suite --level 1 --sample N --seed S`: the draw and its seed are in published.json) and copied along. The
  # session builds every compiled candidate in its pool first, then measures them under the contract; LB_DONE: partial
  # JSONL files of earlier runs, skipped. Then do_bench of every accepted pair, its extensions loaded from the build
  # cache, and the table (leaderboard_table.py). LB_PYTEST: extra pytest arguments (default --autotune-pairs=1).
  # LB_DOBENCH_DONE: the do_bench files of the runs LB_DONE names, for the table.
  [ -f .lb-suite/published.json ] || { say "no .lb-suite/: run autotune import kernelbench, copy .lb-suite here"; exit 2; }
  cp .lb-suite/published.json "$RESULTS/published.json"
  AUTOTUNE_SKIP_DONE="${LB_DONE:-} $RESULTS/lb.partial.jsonl" AUTOTUNE_PARTIAL="$RESULTS/lb.partial.jsonl" \
    run timeout -k 20 -s INT "${RUN_TIMEOUT:-470}" "${PYT[@]}" -q --autotune ${LB_PYTEST:---autotune-pairs=1} \
    --problems=.lb-suite/problems --candidates=.lb-suite/candidates --autotune-db=.autotune/lb.db \
    --autotune-json="$RESULTS/lb.json" .lb-suite/problems
  # OUT PARTIAL...: one report of the items of the partial JSONL files (a later line of a node id wins)
  merge_items() {
    python3 - "$@" <<'PY'
import json, sys
items = {}
for path in sys.argv[2:]:
    try:
        for line in open(path):
            if line.strip():
                it = json.loads(line)
                items[it["nodeid"]] = it
    except OSError:
        pass
json.dump({"items": list(items.values())}, open(sys.argv[1], "w"))
PY
  }
  merge_items "$RESULTS/lb-items.json" ${LB_DONE:-} "$RESULTS/lb.partial.jsonl"
  # do_bench of this run's items only (LB_DONE's were compared in their own job, on their own machine)
  merge_items "$RESULTS/lb-items-this-run.json" "$RESULTS/lb.partial.jsonl"
  if [ "${SKIP_DOBENCH:-0}" != 1 ]; then
    run timeout -k 10 "${DOBENCH_TIMEOUT:-150}" python3 "$HERE/outside_timers.py" dobench --report "$RESULTS/lb-items-this-run.json" \
      --problems .lb-suite/problems --candidates .lb-suite/candidates --build-root .autotune/build \
      --out "$RESULTS/lb-dobench.json"
  fi
  python3 "$HERE/leaderboard_table.py" --published .lb-suite/published.json --items "$RESULTS/lb-items.json" \
    --dobench ${LB_DOBENCH_DONE:-} "$RESULTS/lb-dobench.json" --md "$RESULTS/lb.md" --json "$RESULTS/lb-summary.json" \
    2>&1 | tee -a "$LOG" | head -40
  ;;
kb-l1)
  # KernelBench Level 1 at its published sizes, each problem against itself (kb_level1.py; stage .kb-level1 where
  # a KernelBench checkout is and copy it to the GPU host). KB_DONE: partial JSONL files of earlier runs, skipped.
  [ -f .kb-level1/MANIFEST.json ] || { say "no .kb-level1/: run kb_level1.py stage, copy .kb-level1 here"; exit 2; }
  AUTOTUNE_SKIP_DONE="${KB_DONE:-} $RESULTS/kb-l1.partial.jsonl" AUTOTUNE_PARTIAL="$RESULTS/kb-l1.partial.jsonl" \
    run timeout -k 20 -s INT \
    "${RUN_TIMEOUT:-520}" "${PYT[@]}" -q --autotune --autotune-aa --problems=.kb-level1 --autotune-db=/tmp/kb-l1.db \
    --autotune-json="$RESULTS/kb-l1.json" -k "${K:-reference-aa}" .kb-level1
  python3 "$HERE/kb_level1.py" summarize ${KB_DONE:-} "$RESULTS/kb-l1.partial.jsonl" --md "$RESULTS/kb-l1.md" \
    --json "$RESULTS/kb-l1-summary.json" 2>&1 | tee -a "$LOG" | head -30
  ;;
kb20)
  # 20 problems of KernelBench Level 1, at published sizes, in A/A, drawn by a seed that is printed and kept
  [ -f .kb-level1/MANIFEST.json ] || { say "no .kb-level1/: run kb_level1.py stage, copy .kb-level1 here"; exit 2; }
  SEED="${KB_SEED:-$(python3 -c 'import secrets; print(secrets.randbelow(10**6))')}"
  python3 "$HERE/kb_level1.py" choose --seed "$SEED" --count "${KB_COUNT:-20}" --json "$RESULTS/kb20-selection.json" \
    | tee -a "$LOG" | head -1
  CHOSEN="$(python3 -c 'import json,sys; print(" ".join(json.load(open(sys.argv[1]))["problems"]))' "$RESULTS/kb20-selection.json")"
  say "kb20: seed $SEED: $CHOSEN"
  AUTOTUNE_ONLY_PROBLEMS="$CHOSEN" AUTOTUNE_SKIP_DONE="${KB_DONE:-} $RESULTS/kb20.partial.jsonl" \
    AUTOTUNE_PARTIAL="$RESULTS/kb20.partial.jsonl" run timeout -k 20 -s INT "${RUN_TIMEOUT:-300}" "${PYT[@]}" -q \
    --autotune --autotune-aa --problems=.kb-level1 --autotune-db=/tmp/kb20.db --autotune-json="$RESULTS/kb20.json" \
    -k "${K:-reference-aa}" .kb-level1
  python3 "$HERE/kb_level1.py" summarize ${KB_DONE:-} "$RESULTS/kb20.partial.jsonl" --md "$RESULTS/kb20.md" \
    --json "$RESULTS/kb20-summary.json" 2>&1 | tee -a "$LOG" | head -30
  sed -i "1s/^/seed $SEED (kb_level1.py choose --seed $SEED --count ${KB_COUNT:-20}): /" "$RESULTS/kb20.md" 2>/dev/null
  ;;
headstart)
  # the head start outside the sandboxes: anchors and 09/12, hold off and on, do_bench beside each
  run timeout "${PROBE_TIMEOUT:-420}" python3 "$HERE/head_start_probe.py" --out "$RESULTS/headstart.json" \
    --samples "${PROBE_SAMPLES:-16}" ${PROBE_ONLY:+--only $PROBE_ONLY}
  grep -E "ratio off" "$LOG" | tail -12
  ;;
units)
  units_
  ;;
cpu-aa)
  # items as they finish in $RESULTS/cpu-aa-partial/ (a run cut short by its limit keeps them)
  run timeout "${AA_TIMEOUT:-500}" python3 benchmarks/harness/bench_harness.py aa --repeats "${AA_REPEATS:-1}" \
    --partial "$RESULTS/cpu-aa-partial" --out "$RESULTS/cpu-aa.json" -- ${AA_ARGS:---problems=benchmarks/harness/short_calls --device=cpu}
  tail -40 "$LOG"
  ;;
cpu-layout)
  for mib in 4 1; do
    run timeout 200 python3 benchmarks/harness/cpu_layout_probe.py --processes "${LAYOUT_PROCESSES:-6}" --layouts 8 \
      --seconds 0.03 --mib "$mib" --out "$RESULTS/cpu-layout-${mib}mib.json"
    tail -6 "$LOG"
  done
  ;;
smoke)
  units_
  run timeout 300 python3 -m pytest -p no:cacheprovider -q -rs tests/test_cheat_catalog.py -k gpu_cheat -s \
    --junitxml="$RESULTS/gpu_cheats.xml"
  grep -E "passed|failed|error|accepted|rejected" "$LOG" | tail -6
  K="${K:-aa_relu_4us or (02_relu and relu)}" RUN_TIMEOUT="${RUN_TIMEOUT:-240}" suite smoke
  [ -f "$HERE/jail_check.py" ] && run timeout 120 python3 "$HERE/jail_check.py" --quick --json "$RESULTS/jail.json"
  python3 "$HERE/summarize.py" "$RESULTS" smoke 2>>"$LOG"
  ;;
compiled)
  # the compiled candidates (candidates/<problem>/cuda/: CUDA C++ and Triton; docs/guide/compiled-candidates.md): each
  # built once in its build sandbox and measured (~4 min: nvcc takes ~60-70 s a module), do_bench of the same modules,
  # a second session over the same build cache on two of them (it builds nothing), then the build test and the GPU
  # cheats (KernelBench's adversarial kernels in CUDA C++; ~8 min more: SKIP_TESTS=1 leaves them to a run of their own)
  CK="${K:-relu_cuda or softmax_cuda or layer_norm_cuda or softmax_triton}"
  K="$CK" suite compiled1 --autotune-db=/tmp/compiled.db
  [ "${SKIP_DOBENCH:-0}" = 1 ] || run timeout 200 python3 "$HERE/outside_timers.py" dobench --rotate 0 --pin-main --synced \
    --report "$RESULTS/compiled1.json" --out "$RESULTS/dobench-compiled1.json"
  K="${K2:-relu_cuda or softmax_triton}" RUN_TIMEOUT=120 suite compiled2 --autotune-db=/tmp/compiled.db
  [ "${SKIP_TESTS:-0}" = 1 ] || run timeout 500 python3 -m pytest -p no:cacheprovider -q -rs tests/test_build_e2e.py \
    tests/test_cheat_catalog.py -k "cuda_and_triton or gpu_cheat" -s --junitxml="$RESULTS/compiled_tests.xml"
  grep -E "passed|failed|error" "$LOG" | tail -4
  python3 "$HERE/summarize.py" "$RESULTS" compiled1 2>>"$LOG"
  ;;
full)
  suite run1
  [ "${SKIP_DOBENCH:-0}" = 1 ] || run timeout 200 python3 "$HERE/outside_timers.py" dobench --rotate "${ROTATE:-0}" --pin-main --synced \
    --report "$RESULTS/run1.json" --out "$RESULTS/dobench.json"
  python3 "$HERE/summarize.py" "$RESULTS" run1 2>>"$LOG"
  ;;
aa-spread)
  if [ "${SKIP_CHEATS:-0}" != 1 ]; then
    run timeout 240 python3 -m pytest -p no:cacheprovider -q -rs tests/test_cheat_catalog.py -k gpu_cheat -s \
      --junitxml="$RESULTS/gpu_cheats.xml"
    grep -E "passed|failed|error" "$LOG" | tail -2
  fi
  Y="${AA_YARDSTICK:-aa_relu_130us}"
  for v in ${AA_VARIANTS:-fresh same}; do
    d="/tmp/aa/$v"; mkdir -p "$d/problems"; printf '[pytest]\n' > "$d/pytest.ini"
    for i in $(seq 1 "${AA_N:-4}"); do cp "$HERE/problems/$Y.py" "$d/problems/${Y}_$i.py"; done
    python3 -c "import sys; t=open('protocol.toml').read(); print(t if sys.argv[1]=='fresh' else t.replace('fresh_sandboxes = true', 'fresh_sandboxes = false'), end='')" "$v" > "$d/protocol.toml"
    ( cd "$d" && AUTOTUNE_PARTIAL="$RESULTS/aa-$v.partial.jsonl" timeout -k 10 -s INT 200 python3 -m pytest "${PLUGIN[@]}" \
        -p harness_plugin -p no:cacheprovider -c pytest.ini --rootdir="$d" -q --device=cuda --autotune \
        --autotune-exploratory --autotune-aa --problems=problems --autotune-json="$RESULTS/aa-$v.json" ) >>"$LOG" 2>&1
    say "aa-$v rc=$?"
    python3 -c "
import json,sys
for it in json.load(open(sys.argv[1]))['items']:
    ci=it.get('ci') or [0,0]; d=it.get('details') or {}
    pp=[round(p['speedup'],4) for p in ((d.get('timing') or {}).get('calibration') or {}).get('process_pairs') or [] if p.get('speedup')]
    print(sys.argv[2], it['problem'], it['verdict'], it.get('speedup'), ci, (d.get('timing') or {}).get('calls_per_sample'), round(d.get('item_seconds',0),1), 'pairs of processes', pp)
" "$RESULTS/aa-$v.json" "$v" 2>&1 | tee -a "$LOG"
  done
  ;;
xdist)
  nvidia-smi -L >>"$LOG" 2>&1
  S0=$(date +%s); RUN_TIMEOUT="${RUN_TIMEOUT_N0:-170}" suite n0 -n 0; say "wall -n 0: $(( $(date +%s) - S0 )) s"
  S2=$(date +%s); RUN_TIMEOUT="${RUN_TIMEOUT_N2:-130}" suite n2 -n 2; say "wall -n 2: $(( $(date +%s) - S2 )) s"
  for n in n0 n2; do run timeout 60 python3 -m pytest_autotune.cli verify --db "/tmp/$n.db"; done
  python3 "$HERE/xdist_compare.py" "$RESULTS" 2>&1 | tee -a "$LOG"
  [ -f "$HERE/jail_check.py" ] && run timeout "${JAIL_TIMEOUT:-40}" python3 "$HERE/jail_check.py" --quick --json "$RESULTS/jail_check.json"
  ;;
remeasure)
  suite run2
  # do_bench again in this run (the launch-bound references move between runs: compare like with like)
  [ "${SKIP_DOBENCH:-0}" = 1 ] || run timeout 200 python3 "$HERE/outside_timers.py" dobench --rotate 0 --pin-main --synced \
    --report "$RESULTS/run2.json" --out "$RESULTS/dobench-run2.json"
  python3 "$HERE/summarize.py" "$RESULTS" run2 2>>"$LOG"
  run timeout 100 python3 -m pytest -p no:cacheprovider -q -rs tests/test_cheat_catalog.py -k gpu_cheat -s \
    --junitxml="$RESULTS/gpu_cheats.xml"
  grep -E "passed|failed|error" "$LOG" | tail -2
  ;;
jail-cuda)
  # the jail's own cheats (escapes, limits) in a CUDA run alone (the jail mode runs them only if time is left)
  AUTOTUNE_JAIL_TEST_DEVICE=cuda run timeout 120 python3 -m pytest -p no:cacheprovider -q -rs tests/test_jail.py \
    -k tester --junitxml="$RESULTS/jail_cuda.xml"
  sed -n '/tests\/test_jail.py/,$p' "$LOG" | grep -E "passed|failed|error" | tail -2
  ;;
jail)
  # each step's output is in $RESULTS as soon as it ends, whatever a later step does; the whole mode ends inside 4 min
  # the host's facts and the plan are in $RESULTS/jail_facts.json already (the gate above)
  run timeout 80 python3 "$HERE/jail_check.py" --quick --json "$RESULTS/jail_check.json"
  sed -n '/^combination | jail/,/^nvml:/p' "$LOG" | tee "$RESULTS/jail_check.txt"
  run timeout 130 python3 -m pytest -p no:cacheprovider -q -rs -s tests/test_cheat_catalog.py -k gpu_cheat \
    --junitxml="$RESULTS/gpu_cheats.xml"
  sed -n '/-k gpu_cheat/,$p' "$LOG" | grep -E "^(softmax_rows|linear_fp32) |passed|failed|error" | tail -14
  if [ $(( $(date +%s) - T0 )) -lt 150 ]; then  # the jail's own cheats in a CUDA run, if time is left
    AUTOTUNE_JAIL_TEST_DEVICE=cuda run timeout 75 python3 -m pytest -p no:cacheprovider -q -rs tests/test_jail.py \
      -k tester --junitxml="$RESULTS/jail_cuda.xml"
    sed -n '/tests\/test_jail.py/,$p' "$LOG" | grep -E "passed|failed|error" | tail -2
  else
    say "skipped the jail's cheats on CUDA (no time left in 4 min)"
  fi
  ;;
*)
  echo "unknown mode $MODE (smoke | units | headstart | full | remeasure | kb20 | kb-l1 | cpu-aa | cpu-layout | aa-spread | xdist | jail | jail-cuda)" >&2; exit 2 ;;
esac
say "total $(( $(date +%s) - T0 )) s"
