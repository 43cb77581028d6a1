#!/bin/bash
# Issue 15, fifth session, the recorded run of the final tree (the resident Gluon kernel in the dispatcher): the
# benchmark alone on the GPU first (every shape, forward and backward, GPU and eager time, torch and
# torch.compile beside), then nbval over every chapter beside the GPU tests of the Gluon kernels, the dispatcher
# and the operator. Device tool, carry [".whl"]. Writes under $OUT.
set -u
cd "$(dirname "$0")/.." && export PYTHONPATH=$PWD/code PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv; date -u;
  python3 -c "import torch, triton, numpy, sys; print(sys.version.split()[0], torch.__version__, triton.__version__, numpy.__version__)"; } > "$OUT/env.log" 2>&1
cat "$OUT/env.log"
timeout 200 python3 -m softmax_lab.cli bench --out "$OUT" --name h200-issue15j --rep 50 --no-kernels 2>&1 \
    | tee "$OUT/bench.log" | grep -v "^bench" | grep -E "copy|softmax_lab" | tail -40
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/code JUPYTER_PATH=/tmp/site/share/jupyter
python3 -m ipykernel install --user --name softmax-lab --display-name "Softmax Lab (Python 3)" > /dev/null 2>&1
CFG=code/softmax_lab/course/data/nbval_sanitize.cfg
( timeout 250 python3 -m pytest -p no:cacheprovider --nbval-lax --nbval-current-env --nbval-sanitize-with $CFG \
    --nbval-cell-timeout 150 -n 6 --dist loadscope solutions/ > $OUT/nbval.log 2>&1; echo "rc=$?" >> $OUT/nbval.log ) &
( timeout 250 python3 -m pytest -p no:cacheprovider tests/test_gpu.py tests/test_gluon.py tests/test_softmax_api.py \
    tests/test_operator.py -k "gluon or dispatch or eager or bench_shapes or 2_31 or softmax_api or operator" \
    -m "gpu or not gpu" -n 8 --dist loadscope -v -rfE > $OUT/unit.log 2>&1; echo "rc=$?" >> $OUT/unit.log ) &
wait
tail -n 4 $OUT/nbval.log; grep -cE " PASSED" $OUT/unit.log; grep -E " FAILED|^FAILED|^ERROR" $OUT/unit.log | head; tail -n 3 $OUT/unit.log
