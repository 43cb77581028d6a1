#!/bin/bash
# Issue 15, fifth session, the recorded run of the final tree (the staged Gluon kernel in the dispatcher): the benchmark alone on the GPU first (every shape,
# forward and backward, GPU and eager time, torch and torch.compile beside), then the launch-path steps, then
# nbval over every chapter and the unit tests with the GPU-only sizes side by side. Device tool, carry [".whl"].
set -u
cd "$(dirname "$0")/.." && export PYTHONPATH=$PWD/code PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv; date -u;
  python3 -c "import torch, triton, numpy, sys; print(sys.version.split()[0], torch.__version__, triton.__version__, numpy.__version__)"; } > "$OUT/env.log" 2>&1
cat "$OUT/env.log"
if [ "${PART:-bench}" = bench ]; then
timeout 200 python3 -m softmax_lab.cli bench --out "$OUT" --name h200-issue15i --rep 50 --no-kernels 2>&1 \
    | tee "$OUT/bench.log" | grep -v "^bench" | tail -45
timeout 70 python3 results/run-h200-launch.py "$OUT/h200-launch-i.json" > "$OUT/launch.log" 2>&1; tail -24 "$OUT/launch.log"
exit 0
fi
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/code JUPYTER_PATH=/tmp/site/share/jupyter
python3 -m ipykernel install --user --name softmax-lab --display-name "Softmax Lab (Python 3)" > /dev/null 2>&1
CFG=code/softmax_lab/course/data/nbval_sanitize.cfg
( timeout 330 python3 -m pytest -p no:cacheprovider --nbval-lax --nbval-current-env --nbval-sanitize-with $CFG \
    --nbval-cell-timeout 150 -n 6 --dist loadscope solutions/ > $OUT/nbval.log 2>&1; echo "rc=$?" >> $OUT/nbval.log ) &
( timeout 330 python3 -m pytest -p no:cacheprovider tests/test_kernels.py tests/test_softmax_api.py tests/test_long_rows.py \
    tests/test_long_rows_l2.py tests/test_gpu.py tests/test_operator.py tests/test_fast_exp.py tests/test_staged.py \
    -m "gpu or not gpu" -n 8 --dist loadscope -v -rfE > $OUT/unit.log 2>&1; echo "rc=$?" >> $OUT/unit.log ) &
wait
tail -n 4 $OUT/nbval.log; grep -cE " PASSED" $OUT/unit.log; grep -E " FAILED|^FAILED|^ERROR" $OUT/unit.log | head; tail -n 3 $OUT/unit.log
