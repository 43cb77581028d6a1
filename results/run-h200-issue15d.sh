#!/bin/bash
# Issue 15, fourth session: GPU tests of the staged kernels, then the sweep of run-h200-issue15d.py, on the H200
# via the device tool (the working tree travels; nothing installed). Every step has a timeout.
set -u
cd "$(dirname "$0")/.." && export PYTHONPATH=$PWD/code PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv; date -u;
  python3 -c "import torch, triton, numpy, sys; print(sys.version.split()[0], torch.__version__, triton.__version__, numpy.__version__)"; } > "$OUT/env.log" 2>&1
cat "$OUT/env.log"
timeout ${TESTS_S:-90} python3 -m pytest results/test_probe_staged.py -m "gpu or not gpu" -v -n 8 -rfE \
    --tb=short -p no:cacheprovider > "$OUT/tests.log" 2>&1; grep -E "PASS|FAIL|ERROR" "$OUT/tests.log" | tail -40
timeout ${SWEEP_S:-300} python3 results/run-h200-issue15d.py "$OUT/h200-issue15d.json" ${QUICK:-} 2>&1 | tee "$OUT/sweep.log" | grep -v "^ *$" | tail -150
