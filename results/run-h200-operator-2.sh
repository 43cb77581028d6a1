#!/bin/bash
# Issue 12, second H200 call: per-call cost after the autograd.Function change, Inductor's code around the
# masked operator, and the operator tests again. Usage (device run): bash .wt/op/results/run-h200-operator-2.sh
set -u
cd "$(dirname "$0")/.." && export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/code
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
timeout 40 python3 results/run-h200-operator.py --label after2 --out "$OUT/operator-after2.json" > "$OUT/after2.log" 2>&1
timeout 40 python3 results/run-h200-operator-code.py > "$OUT/inductor-code.log" 2>&1
timeout 60 python3 -m pytest tests/test_operator.py tests/test_softmax_api.py -q -n 8 -p no:cacheprovider -p no:warnings > "$OUT/tests2.log" 2>&1
tail -3 "$OUT/tests2.log"; tail -n 40 "$OUT/inductor-code.log"
