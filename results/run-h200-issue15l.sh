#!/bin/bash
# Issue 15, sixth session, the recorded run of the final tree (clustered and resident kernels in the dispatcher,
# relaunch plans for both): PART=bench, the benchmark alone on the GPU (every shape, forward and backward, GPU
# and eager time, torch and torch.compile beside), then the dispatcher's new boundaries; PART=tests, nbval over
# every chapter beside the GPU unit tests, after the row-alignment probe and the boundaries again (the
# output stored as whole vectors). Device tool, carry [".whl"] for PART=tests. Writes under $OUT.
set -u
cd "$(dirname "$0")/.." && export PYTHONPATH=$PWD/code PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv; date -u;
  python3 -c "import torch, triton, numpy, sys; print(sys.version.split()[0], torch.__version__, triton.__version__, numpy.__version__)"; } > "$OUT/env-${PART}.log" 2>&1
cat "$OUT/env-${PART}.log"
if [ "$PART" = bench ]; then
  timeout 330 python3 -m softmax_lab.cli bench --out "$OUT" --name h200-issue15l --rep 50 --no-kernels 2>&1 \
      | tee "$OUT/bench.log" | grep -v "^bench" | grep -E "copy|softmax_lab" | tail -40
  timeout 200 python3 results/run-h200-boundaries.py "$OUT/h200-boundaries.json" 2>&1 | tee "$OUT/boundaries.log"
  exit 0
fi
timeout 60 python3 results/probe_row_alignment.py 2>&1 | tee "$OUT/probe_row_alignment.log"
timeout 100 python3 results/run-h200-boundaries.py "$OUT/h200-boundaries-b.json" > "$OUT/boundaries-b.log" 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/code JUPYTER_PATH=/tmp/site/share/jupyter
python3 -m ipykernel install --user --name softmax-lab --display-name "Softmax Lab (Python 3)" > /dev/null 2>&1
CFG=code/softmax_lab/course/data/nbval_sanitize.cfg
( timeout 330 python3 -m pytest -p no:cacheprovider --nbval-lax --nbval-current-env --nbval-sanitize-with $CFG \
    --nbval-cell-timeout 150 -n 6 --dist loadscope solutions/ > $OUT/nbval.log 2>&1; echo "rc=$?" >> $OUT/nbval.log ) &
( timeout 370 python3 -m pytest -p no:cacheprovider tests/test_gpu.py tests/test_gluon.py tests/test_softmax_api.py \
    tests/test_operator.py -m "gpu or not gpu" -n 8 --dist loadscope -v -rfE --durations=15 > $OUT/unit.log 2>&1;
  echo "rc=$?" >> $OUT/unit.log ) &
wait
tail -n 4 $OUT/nbval.log; grep -cE " PASSED" $OUT/unit.log; grep -E " FAILED|^FAILED|^ERROR" $OUT/unit.log | head -20
tail -n 25 $OUT/unit.log
