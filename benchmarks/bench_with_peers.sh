#!/usr/bin/env bash
# softmax-lab bench with its peers on the GPU machine (benchmarks/README.md): QuACK and Liger-Kernel unpacked as
# ../shared/tools/device-peers.sh prepares them (an earlier call of the same warm machine copied .peers/cdsl.1
# to /tmp/cdsl), then `softmax-lab bench --lm-widths --peers` with every result in $OUT (BENCH_ROUNDS=K: each shape's
# implementations timed K times in turn; BENCH_SECONDS 240 a round unless set, 560 at most: the GPU machine stops a
# command at 600 s; the JSON is saved after each shape, and `softmax-lab bench --scorecard` reads it).
set -uo pipefail
mkdir -p /tmp/site && cat /tmp/cdsl/cdsl.1 .peers/cdsl.2 | tar xJ -C /tmp/site || exit 1
for w in .peers/whl/*.whl; do python3 -m zipfile -e "$w" /tmp/site; done
export PYTHONPATH=$PWD/code:/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages:${PYTHONPATH:-} PYTHONUNBUFFERED=1
python3 -c "import quack.softmax, liger_kernel" || echo "peers did not import"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/device.txt"
timeout "${BENCH_SECONDS:-$((240 * ${BENCH_ROUNDS:-1} < 560 ? 240 * ${BENCH_ROUNDS:-1} : 560))}" python3 -m softmax_lab.bench --lm-widths --peers --no-kernels --rep 40 --out "$OUT" \
  --rounds "${BENCH_ROUNDS:-1}" --name "${BENCH_NAME:-h200-bench-lm-widths}" 2>&1 | tee "$OUT/bench.log" | grep -v "^\[bench"
python3 -m softmax_lab.bench --scorecard "$OUT/${BENCH_NAME:-h200-bench-lm-widths}.json" | tee "$OUT/scorecard.md"
