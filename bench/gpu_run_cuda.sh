#!/bin/bash
# `kernelmill run --backend cuda` end to end on a GPU box (no Prefect there: --no-prefect calls the same stage
# functions), on the embedded default, in two device calls chained while the machine is warm (the wheels of
# `RUN=1 bash bench/gpu_wheels.sh` are over one call's 64 MiB with the repository):
#   PHASE=solver bash bench/gpu_run_cuda.sh   # carry ext/whl_z3 (the z3-solver wheel alone): installs it in /tmp/site
#   bash bench/gpu_run_cuda.sh                # carry ext/whl_run (the other RUN=1 wheels): installs them, runs
# Writes $OUT/run_cuda.log (every stage's lines and the final table) and $OUT/run_counts.json.
set -u
SITE=${SITE:-/tmp/site}
if [ "${PHASE:-run}" = solver ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" ext/whl_z3/*.whl \
        && echo "z3 installed in $SITE" && exit 0
    exit 1
fi
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" ext/whl_run/*.whl || exit 1
python3 -c "import sys; sys.path.insert(0, '$SITE'); import z3" || { echo "z3 missing: run PHASE=solver first"; exit 1; }
export PYTHONPATH=$SITE:. TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0} PYTHONUNBUFFERED=1 PATH=$SITE/bin:$PATH
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1
echo "commit: ${KERNELMILL_COMMIT:-unknown}"
RUN_DIR=${RUN_DIR:-/tmp/km_run_cuda}
start=$(date +%s)
timeout ${RUN_S:-400} python3 -c "import sys; from flows.cli import main; sys.argv = ['kernelmill'] + sys.argv[1:]; sys.exit(main())" \
    run --backend cuda --no-prefect --out "$RUN_DIR" >"$OUT/run_cuda.log" 2>&1
echo "kernelmill run exit $? after $(( $(date +%s) - start )) s" | tee -a "$OUT/run_cuda.log"
cp "$RUN_DIR/run_counts.json" "$OUT/" 2>/dev/null
grep -c " ERROR " "$OUT/run_cuda.log" | sed 's/^/ERROR lines: /'
tail -40 "$OUT/run_cuda.log"
