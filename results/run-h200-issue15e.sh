#!/bin/bash
# Issue 15, fourth session, after kernels/fast_exp.py: the GPU tests of the kernels and the operator, the recorded
# benchmark (every shape, forward and backward, GPU and eager time, torch and torch.compile beside), the launch
# path, and a knob sweep of the long-row kernels, on the H200 via the device tool (working tree carried, nothing
# installed). Every step has a timeout, so a kernel that waited for ever could not hang the run. Writes under $OUT.
set -u
cd "$(dirname "$0")/.." && export PYTHONPATH=$PWD/code PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv; date -u;
  python3 -c "import torch, triton, numpy, sys; print(sys.version.split()[0], torch.__version__, triton.__version__, numpy.__version__)"; } > "$OUT/env.log" 2>&1
cat "$OUT/env.log"
timeout 200 python3 -m softmax_lab.cli bench --out "$OUT" --name h200-issue15e --rep 50 --no-kernels 2>&1 \
    | tee "$OUT/bench.log" | grep -v "^bench" | tail -45
timeout 70 python3 results/run-h200-launch.py "$OUT/h200-launch-e.json" > "$OUT/launch.log" 2>&1; tail -22 "$OUT/launch.log"
timeout 110 python3 results/run-h200-issue15c.py "$OUT/h200-issue15e-sweep.json" > "$OUT/sweep.log" 2>&1; grep -v "^ *$" "$OUT/sweep.log" | cut -c1-160 | tail -110
timeout 150 python3 -m pytest tests/test_kernels.py tests/test_softmax_api.py tests/test_long_rows.py tests/test_long_rows_l2.py \
    tests/test_gpu.py tests/test_operator.py -m "gpu or not gpu" -q -n 12 -rfE --tb=short -p no:cacheprovider \
    > "$OUT/tests.log" 2>&1; tail -15 "$OUT/tests.log"
