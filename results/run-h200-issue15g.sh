#!/bin/bash
# Issue 15, fourth session: after the memcount fix, nbval over every chapter on the H200 and the GPU tests that the
# 15f run's timeout cut off. Device tool, carry [".whl"]. Writes under $OUT.
set -u
cd "$(dirname "$0")/.." && OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/code JUPYTER_PATH=/tmp/site/share/jupyter PYTHONUNBUFFERED=1
python3 -m ipykernel install --user --name softmax-lab --display-name "Softmax Lab (Python 3)" > /dev/null 2>&1
date -u > "$OUT/env.log"
CFG=code/softmax_lab/course/data/nbval_sanitize.cfg
( timeout 240 python3 -m pytest -p no:cacheprovider --nbval-lax --nbval-current-env --nbval-sanitize-with $CFG \
    --nbval-cell-timeout 150 -n 6 --dist loadscope solutions/ > $OUT/nbval.log 2>&1; echo "rc=$?" >> $OUT/nbval.log ) &
( timeout 240 python3 -m pytest -p no:cacheprovider tests/test_gpu.py tests/test_operator.py tests/test_fast_exp.py \
    tests/test_measure.py tests/test_memcount.py -m "gpu or not gpu" -n 6 --dist loadscope -v -rfE > $OUT/unit.log 2>&1; echo "rc=$?" >> $OUT/unit.log ) &
wait
tail -n 4 $OUT/nbval.log; grep -cE " PASSED" $OUT/unit.log; grep -E " FAILED|^FAILED|^ERROR" $OUT/unit.log | head; tail -n 3 $OUT/unit.log
