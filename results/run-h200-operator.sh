#!/bin/bash
# Issue 12 on the H200 (device tool; the worktree travels as .wt/op, the run starts in main's tree = "before").
# Usage (device run): bash .wt/op/results/run-h200-operator.sh   -> logs and JSON under $OUT
set -u
BEFORE=$PWD/code
cd "$(dirname "$0")/.." && export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv > "$OUT/env.log"
python3 -c "import torch, triton, sys; print(sys.version.split()[0], torch.__version__, triton.__version__)" >> "$OUT/env.log"
PYTHONPATH=$BEFORE timeout 45 python3 results/run-h200-operator.py --label before --out "$OUT/operator-before.json" > "$OUT/before.log" 2>&1
export PYTHONPATH=$PWD/code
timeout 90 python3 results/run-h200-operator.py --label after --attention --out "$OUT/operator-after.json" > "$OUT/after.log" 2>&1
timeout 120 python3 -m pytest tests/test_operator.py tests/test_softmax_api.py tests/test_kernels.py tests/test_gpu.py \
  -m "gpu or not gpu" -q -n 8 -p no:cacheprovider -p no:warnings > "$OUT/tests.log" 2>&1
tail -15 "$OUT/tests.log"; tail -4 "$OUT/before.log" "$OUT/after.log"
