#!/bin/bash
# Issue 15, third session (perf3): the GPU tests of the long-row kernels, then the sweep of
# run-h200-issue15c.py, on the H200 via the device tool; the worktree travels as .wt/perf3. Writes under $OUT.
# Every step has a timeout, so a kernel that waited for ever could not hang the run.
set -u
cd "$(dirname "$0")/.." && export PYTHONPATH=$PWD/code PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv; date -u;
  python3 -c "import torch, triton, numpy, sys; print(sys.version.split()[0], torch.__version__, triton.__version__, numpy.__version__)"; } > "$OUT/env.log" 2>&1
cat "$OUT/env.log"
timeout 75 python3 -m pytest tests/test_long_rows_l2.py tests/test_long_rows.py -m "gpu or not gpu" -q -n 8 -rfE \
    --tb=short -p no:cacheprovider > "$OUT/tests.log" 2>&1; tail -6 "$OUT/tests.log"
timeout ${SWEEP_S:-150} python3 results/run-h200-issue15c.py "$OUT/h200-issue15c.json" 2>&1 | tee "$OUT/sweep.log" | grep -v "^ *$" | tail -150
