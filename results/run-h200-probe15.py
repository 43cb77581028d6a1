"""Issue 15, long rows: a focused sweep of the cooperative and pipelined kernels (BLOCK, warps, keep_16) on the
shapes below their targets. GPU time as in ``softmax-lab bench`` (CUDA graph over rotating buffers of
>= 512 MiB, median), each setting checked against a float64 softmax first.
Usage (GPU machine, repository root): ``python3 results/run-h200-probe15.py OUT.json``."""
import json
import sys
import time

import torch
import triton

import softmax_lab
from softmax_lab import bench
from softmax_lab.kernels import cooperative_softmax, pipelined_softmax

F32, BF16 = torch.float32, torch.bfloat16
SHAPES = [(2048, 32768, BF16), (1024, 65536, BF16), (1024, 65536, F32), (256, 262144, F32), (16, 1048576, F32)]


def candidates(dtype):
    wide = dtype == F32
    out = [("cooperative", dict(BLOCK=b, num_warps=w)) for b, w in
           ((8192, 4), (8192, 8), (16384, 8), (16384, 16)) if not (wide and b > 8192)]
    if not wide:
        out += [("cooperative", dict(BLOCK=b, num_warps=w, keep_16=True)) for b, w in
                ((4096, 4), (8192, 4), (8192, 8), (16384, 8), (16384, 16))]
    for b, w in ((2048, 2), (4096, 4), (4096, 8), (8192, 8)):
        out.append(("pipelined", dict(BLOCK=b, num_warps=w)))
        if not wide:
            out.append(("pipelined", dict(BLOCK=b, num_warps=w, keep_16=True)))
    return out


def main(path):
    records = []
    for n_rows, n_cols, dtype in SHAPES:
        moved = 2 * n_rows * n_cols * dtype.itemsize
        n_buf = max(2, min(16, -(-bench.ROTATE_BYTES // moved)))
        xs = bench._buffers((n_rows, n_cols), dtype, n_buf)
        outs = [torch.empty_like(xs[0]) for _ in range(n_buf)]
        copy = bench._time(lambda i: outs[i].copy_(xs[i]), n_buf, 20)
        rows = []
        for name, knobs in [("dispatcher", {})] + candidates(dtype):
            f = {"cooperative": cooperative_softmax, "pipelined": pipelined_softmax}.get(name)
            fn = (lambda i: softmax_lab.softmax(xs[i])) if f is None else \
                (lambda i, f=f, k=knobs: f(xs[i], out=outs[i], **k))
            rec = dict(rows=n_rows, cols=n_cols, dtype=str(dtype), impl=name, knobs=knobs)
            try:
                rec["checked"] = bench._check(fn(0), xs[0]) or "ok"
                rec["ms"] = bench._time(fn, n_buf, 20)
                rec["pct_copy"] = 100 * copy / rec["ms"]
            except Exception as err:
                rec["error"] = f"{type(err).__name__}: {err}"[:200]
            rows.append(rec)
            print(n_rows, n_cols, dtype, name, knobs, f"{rec.get('pct_copy', 0):.1f}%", rec.get("checked", ""),
                  rec.get("error", ""), flush=True)
        records += rows
        xs = outs = None
        torch.cuda.empty_cache()
    meta = dict(device=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__,
                date=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                command="python3 results/run-h200-probe15.py " + path,
                timing="do_bench_cudagraph median, rep 20 ms, rotating buffers >= 512 MiB; % of copy timed alike")
    with open(path, "w") as fh:
        json.dump(dict(meta=meta, records=records), fh, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
