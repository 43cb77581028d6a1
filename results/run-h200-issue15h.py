"""Issue 15, fourth session, last probe: chunk size and threads per chunk of the cooperative kernel for the rows
still furthest from copy speed, and a register cap (Triton's ``maxnreg``) that lets two 1024-thread programs of
the fused kernel share a multiprocessor. Timing and checks as in run-h200-issue15c.py (graph-timed median over
rotating buffers, a copy of the same bytes = 100%, float64 check of 3 rows of a poisoned output before and after).
Usage (GPU machine, repository root): ``python3 results/run-h200-issue15h.py OUT.json``"""
import json
import sys
import time

import torch
import triton

import softmax_lab
from softmax_lab import bench
from softmax_lab.kernels import cooperative_softmax
from softmax_lab.kernels.fused import fused_softmax_kernel

BF16, F32 = torch.bfloat16, torch.float32
SETTINGS = {
    (2048, 32768, BF16): [("cooperative", dict(BLOCK=8192, num_warps=4)), ("cooperative", dict(BLOCK=16384, num_warps=4)),
                          ("cooperative", dict(BLOCK=16384, num_warps=8)), ("cooperative", dict(BLOCK=8192, num_warps=2)),
                          ("fused+maxnreg", dict(num_warps=32, maxnreg=32)), ("fused+maxnreg", dict(num_warps=16, maxnreg=64))],
    (1024, 65536, BF16): [("cooperative", dict(BLOCK=8192, num_warps=4)), ("cooperative", dict(BLOCK=16384, num_warps=4)),
                          ("cooperative", dict(BLOCK=16384, num_warps=8)), ("cooperative", dict(BLOCK=8192, num_warps=2))],
    (1024, 65536, F32): [("cooperative", dict(BLOCK=8192, num_warps=4)), ("cooperative", dict(BLOCK=8192, num_warps=2)),
                         ("cooperative", dict(BLOCK=4096, num_warps=2)), ("cooperative", dict(BLOCK=16384, num_warps=8))],
}


def main(path):
    started, records = time.time(), []
    for (n_rows, n_cols, dtype), settings in SETTINGS.items():
        moved = 2 * n_rows * n_cols * dtype.itemsize
        n_buf = max(2, min(16, -(-bench.ROTATE_BYTES // moved)))
        xs = bench._buffers((n_rows, n_cols), dtype, n_buf)
        outs = [torch.empty_like(xs[0]) for _ in range(n_buf)]
        copy = bench._time(lambda i: outs[i].copy_(xs[i]), n_buf, 20)
        for name, knobs in [("dispatcher", {})] + settings:
            if name == "dispatcher":
                fn = lambda i: softmax_lab.softmax(xs[i])  # noqa: E731
            elif name == "cooperative":
                fn = lambda i, k=knobs: cooperative_softmax(xs[i], out=outs[i], **k)  # noqa: E731
            else:
                def fn(i, k=knobs):
                    fused_softmax_kernel[(n_rows,)](outs[i], xs[i], n_cols, n_cols, n_cols,
                                                    BLOCK=triton.next_power_of_2(n_cols), **k)
                    return outs[i]
            rec = dict(rows=n_rows, cols=n_cols, dtype=str(dtype).split(".")[1], impl=name, knobs=knobs)
            try:
                outs[0].fill_(float("nan"))
                bad = bench._check(fn(0), xs[0])
                rec["ms"] = bench._time(fn, n_buf, 20)
                rec["pct_copy"] = 100 * copy / rec["ms"]
                outs[-1].fill_(float("nan"))
                rec["checked"] = bad or bench._check(fn(n_buf - 1), xs[n_buf - 1]) or "ok"
            except Exception as err:
                rec["error"] = f"{type(err).__name__}: {err}"[:300]
            records.append(rec)
            print(n_rows, n_cols, rec["dtype"], name, knobs, f"{rec.get('pct_copy', 0):.1f}%", rec.get("checked", ""),
                  rec.get("error", ""), flush=True)
        xs = outs = None
        torch.cuda.empty_cache()
        meta = dict(device=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__,
                    date=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), seconds=round(time.time() - started, 1),
                    command="python3 results/run-h200-issue15h.py " + " ".join(sys.argv[1:]))
        with open(path, "w") as fh:
            json.dump(dict(meta=meta, records=records), fh, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
