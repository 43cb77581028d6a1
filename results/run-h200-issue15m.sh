#!/bin/bash
# Issue 15, seventh session. PART=bench: the register kernels with and without ints in vectors
# (run-h200-vectors.py), the recorded benchmark of this tree (every shape, forward and backward, GPU and eager
# time, torch and torch.compile beside), and Nsight Compute's stall reasons for the clustered and resident
# kernels. PART=tests: the padding sweeps on the new dispatcher limits, then nbval over every chapter beside
# the GPU unit tests. Device tool (carry [".whl"] for
# PART=tests). Writes under $OUT.
set -u
cd "$(dirname "$0")/.." && export PYTHONPATH=$PWD/code PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv; date -u;
  python3 -c "import torch, triton, numpy, sys; print(sys.version.split()[0], torch.__version__, triton.__version__, numpy.__version__)"; } > "$OUT/env-${PART}.log" 2>&1
cat "$OUT/env-${PART}.log"
if [ "$PART" = bench ]; then
  timeout 150 python3 results/run-h200-vectors.py "$OUT/h200-vectors.json" 2>&1 | tee "$OUT/vectors.log" | cut -c1-300
  timeout 300 python3 -m softmax_lab.cli bench --out "$OUT" --name h200-issue15m --rep 50 --no-kernels 2>&1 \
      | tee "$OUT/bench.log" | grep -v "^bench" | grep -E "copy|softmax_lab" | tail -40
  timeout 100 ncu --section WarpStateStats --section Occupancy --section SpeedOfLight -k regex:softmax_kernel \
      python3 results/probe_cluster_stalls.py > "$OUT/ncu-stalls.log" 2>&1; echo "ncu rc=$?"
  grep -E "==PROF==|softmax_kernel|Stall|Warp Cycles|Achieved Occupancy|Theoretical Occupancy|Memory Throughput|DRAM Throughput|Duration" "$OUT/ncu-stalls.log" | head -80
  exit 0
fi
# the padding sweeps again, on the dispatcher with its new limits (the GPU alone), then the tests
timeout 90 python3 results/run-h200-padding.py "$OUT/h200-padding-c.json" > "$OUT/padding-c.log" 2>&1
timeout 90 python3 results/run-h200-padding.py "$OUT/h200-padding-d.json" b > "$OUT/padding-d.log" 2>&1
grep -h dispatcher "$OUT"/padding-[cd].log | cut -c1-160
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/code JUPYTER_PATH=/tmp/site/share/jupyter
python3 -m ipykernel install --user --name softmax-lab --display-name "Softmax Lab (Python 3)" > /dev/null 2>&1
CFG=code/softmax_lab/course/data/nbval_sanitize.cfg
( timeout 330 python3 -m pytest -p no:cacheprovider --nbval-lax --nbval-current-env --nbval-sanitize-with $CFG \
    --nbval-cell-timeout 150 -n 5 --dist loadscope solutions/ > $OUT/nbval.log 2>&1; echo "rc=$?" >> $OUT/nbval.log ) &
( timeout 420 python3 -m pytest -p no:cacheprovider tests/test_gpu.py tests/test_gluon.py tests/test_softmax_api.py \
    tests/test_operator.py tests/test_kernels.py tests/test_fast_exp.py -m "gpu or not gpu" -n 9 --dist loadscope \
    -v -rfE --durations=15 > $OUT/unit.log 2>&1; echo "rc=$?" >> $OUT/unit.log ) &
wait
tail -n 4 $OUT/nbval.log; grep -cE " PASSED" $OUT/unit.log; grep -E " FAILED|^FAILED|^ERROR" $OUT/unit.log | head -20
tail -n 25 $OUT/unit.log
