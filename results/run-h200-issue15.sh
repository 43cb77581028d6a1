#!/bin/bash
# Issue 15 runs on the H200 (device tool; the worktree travels as .wt/perf). Usage: run-h200-issue15.sh sweep|final
# Writes logs and JSON under $OUT. Every step has a timeout, so a kernel that waited for ever could not hang the run.
set -u
cd "$(dirname "$0")/.." && export PYTHONPATH=$PWD/code PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv | tee "$OUT/env.log"
python3 -c "import torch, triton, numpy, sys; print(sys.version.split()[0], torch.__version__, triton.__version__, numpy.__version__)" | tee -a "$OUT/env.log"
if [ "$1" = sweep ]; then
  timeout 60 python3 - <<'PY' 2>&1 | tee "$OUT/smoke.log"
import torch, softmax_lab
from softmax_lab.kernels import cooperative_softmax, cooperative_backward
from softmax_lab.kernels import cooperative as c
for dt in (torch.float32, torch.bfloat16):
    x = torch.randn(1024, 65536, device="cuda").mul(3).to(dt)
    for B, w in ((4096, 4), (8192, 8), (16384, 16), (8192, 4), (16384, 8)):
        y = cooperative_softmax(x, BLOCK=B, num_warps=w)
        torch.cuda.synchronize()
        err = (y[:4].double() - torch.softmax(x[:4].double(), -1)).abs().max().item()
        print(dt, B, w, "max err", f"{err:.2e}")
for k, v in c._RESIDENT.items():
    print("resident", k[3], v)
PY
  timeout 180 python3 -m pytest tests/test_long_rows.py tests/test_gpu.py -m "gpu or not gpu" -q -n 8 2>&1 | tail -60 > "$OUT/tests.log"; tail -5 "$OUT/tests.log"
  timeout 330 python3 -m softmax_lab.cli bench --out "$OUT" --name h200-sweep-issue15 --sweep --sweep-only cooperative,cooperative_backward \
      --rep 20 --no-eager --no-peers --no-kernels --no-check \
      --only 2048x32768,1024x65536,256x262144,16x1048576,8x4194304 2>&1 | grep -v "^|" | tail -30
  python3 - "$OUT/h200-sweep-issue15.json" <<'PY' 2>&1 | tee "$OUT/best.log"
import json, sys
d = json.load(open(sys.argv[1]))
groups = {}
for r in d["records"]:
    groups.setdefault((r["kind"], r["rows"], r["cols"], r["dtype"]), []).append(r)
for key, rs in groups.items():
    ok = sorted((r for r in rs if "ms" in r and "pct_copy" in r), key=lambda r: -r["pct_copy"])
    base = [f"{r['impl']} {r['pct_copy']:.1f}" for r in ok if not r["impl"].startswith("sweep:")]
    print(key, "|", ", ".join(base))
    for r in [r for r in ok if r["impl"].startswith("sweep:")][:6]:
        print("    ", r["impl"], r["knobs"], f"{r['pct_copy']:.1f}%")
    errs = [r for r in rs if "error" in r]
    for r in errs[:3]:
        print("   ERR", r["impl"], r["knobs"], r["error"][:150])
PY
else
  timeout 200 python3 -m pytest tests/test_kernels.py tests/test_softmax_api.py tests/test_long_rows.py tests/test_gpu.py \
      -m "gpu or not gpu" -q -n 8 2>&1 | tail -40 > "$OUT/h200-issue15-tests.log"; tail -5 "$OUT/h200-issue15-tests.log"
  timeout 330 python3 -m softmax_lab.cli bench --out "$OUT" --name h200-issue15 --rep 50 --no-kernels 2>&1 \
      | tee "$OUT/h200-issue15-bench.log" | grep -v "^bench"
  timeout 100 python3 -m softmax_lab.cli bench --out "$OUT" --name h200-issue15-tiles --sweep --sweep-only cooperative \
      --rep 20 --no-eager --no-peers --no-kernels --no-check --no-backward --only 256x262144,16x1048576,8x4194304 \
      2>&1 | grep -v "^|" | tail -8
fi
