#!/bin/bash
# Issue 15, second session (launch path, pipelined/keep_16 long rows, the recorded benchmark) on the H200 via the
# device tool; the worktree travels as .wt/perf2. Usage: run-h200-issue15b.sh probe|final. Writes under $OUT.
# Every step has a timeout, so a kernel that waited for ever could not hang the run.
set -u
cd "$(dirname "$0")/.." && export PYTHONPATH=$PWD/code PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv | tee "$OUT/env.log"
python3 -c "import torch, triton, numpy, sys; print(sys.version.split()[0], torch.__version__, triton.__version__, numpy.__version__)" | tee -a "$OUT/env.log"
python3 -c "import tqdm, matplotlib" 2>&1 | tail -1 | tee -a "$OUT/env.log"
TESTS="tests/test_kernels.py tests/test_softmax_api.py tests/test_long_rows.py tests/test_gpu.py tests/test_operator.py"
if [ "$1" = probe ]; then
  timeout 240 python3 -m pytest $TESTS -m "gpu or not gpu" -q -n 8 -x 2>&1 | tail -30 > "$OUT/tests.log"; tail -4 "$OUT/tests.log"
  timeout 120 python3 results/run-h200-launch.py "$OUT/h200-launch-probe.json" 2>&1 | tail -60
  timeout 220 python3 results/run-h200-probe15.py "$OUT/h200-probe15.json" 2>&1 | tail -80
else
  # the recorded run: the benchmark first, then the launch-path steps, then the tests with the time left
  timeout 230 python3 -m softmax_lab.cli bench --out "$OUT" --name h200-issue15b --rep 50 --no-kernels 2>&1 \
      | tee "$OUT/h200-issue15b-bench.log" | grep -v "^bench" | tail -40
  timeout 70 python3 results/run-h200-launch.py "$OUT/h200-launch.json" > "$OUT/h200-launch.log" 2>&1; tail -20 "$OUT/h200-launch.log"
  timeout 120 python3 -m pytest tests/test_kernels.py tests/test_softmax_api.py tests/test_long_rows.py tests/test_gpu.py \
      -m "gpu or not gpu" -q -n 12 -rfE --tb=short -p no:cacheprovider > "$OUT/h200-issue15b-tests.log" 2>&1; tail -15 "$OUT/h200-issue15b-tests.log"
  timeout 75 python3 -m pytest tests/test_operator.py -m "gpu or not gpu" -q -n 12 -rfE --tb=short -p no:cacheprovider \
      > "$OUT/h200-issue15b-operator-tests.log" 2>&1; tail -15 "$OUT/h200-issue15b-operator-tests.log"
fi
