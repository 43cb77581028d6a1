"""Issue 15, sixth session: the dispatcher's new boundaries checked on shapes between the benchmark's. At each
shape, the dispatcher's kernel beside the kernel it took over from (the rule before this session), timed as
``softmax-lab bench`` times (do_bench_cudagraph median, rep 20 ms, rotating buffers >= 512 MiB; checked before
and after). Usage (GPU machine, repository root): ``python3 benchmarks/sweeps/kernel_boundaries.py OUT.json``"""
import json
import sys
import time

import torch
import triton

import softmax_lab
from softmax_lab import bench
from softmax_lab.kernels import cooperative_softmax, fused_softmax

F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16
NAMES = {F32: "float32", F16: "float16", BF16: "bfloat16"}
BEFORE = {"fused": lambda x, y: fused_softmax(x, out=y, num_warps=32),
          "cooperative": lambda x, y: cooperative_softmax(x, out=y, BLOCK=8192, num_warps=4)}
SHAPES = [(8192, 8200, BF16, "fused"), (4096, 12288, BF16, "fused"), (4096, 16384, F16, "fused"),
          (2048, 40000, F32, "cooperative"), (2048, 49152, F32, "cooperative"), (1024, 40000, BF16, "cooperative"),
          (1024, 49152, BF16, "cooperative"), (1024, 100000, BF16, "cooperative"), (512, 131072, F16, "cooperative"),
          (8192, 65536, F32, "cooperative"), (64, 65536, BF16, "cooperative")]


def main(path):
    started = time.time()
    meta = dict(device=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__,
                date=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                command="python3 benchmarks/sweeps/kernel_boundaries.py " + " ".join(sys.argv[1:]),
                timing="do_bench_cudagraph median, rep 20 ms, rotating buffers >= 512 MiB; % of copy timed alike")
    records = []
    for n_rows, n_cols, dtype, before in SHAPES:
        moved = 2 * n_rows * n_cols * dtype.itemsize
        n_buf = max(2, min(16, -(-bench.ROTATE_BYTES // moved)))
        xs = bench._buffers((n_rows, n_cols), dtype, n_buf)
        outs = [torch.empty_like(xs[0]) for _ in range(n_buf)]
        copy = bench._time(lambda i: outs[i].copy_(xs[i]), n_buf, 20)
        base = dict(rows=n_rows, cols=n_cols, dtype=NAMES[dtype], bytes=moved, buffers=n_buf)
        choice = softmax_lab.softmax.choose(n_rows, n_cols, dtype)[0]
        for name, fn in (("dispatcher", lambda i: softmax_lab.softmax(xs[i])),
                         (before, lambda i: BEFORE[before](xs[i], outs[i]))):
            rec = dict(base, impl=name, choice=choice if name == "dispatcher" else before)
            outs[0].fill_(float("nan"))
            bad = bench._check(fn(0), xs[0])
            rec["ms"] = bench._time(fn, n_buf, 20)
            rec["pct_copy"] = 100 * copy / rec["ms"]
            outs[-1].fill_(float("nan"))
            rec["checked"] = bad or bench._check(fn(n_buf - 1), xs[n_buf - 1]) or "ok"
            rec["eager_ms"] = bench._time_eager(fn, n_buf, rec["ms"])
            records.append(rec)
            print(n_rows, n_cols, NAMES[dtype], name, rec["choice"], f"{rec['pct_copy']:.1f}%",
                  f"eager {rec['eager_ms'] * 1e3:.1f} us", rec["checked"], flush=True)
        xs = outs = None
        torch.cuda.empty_cache()
        meta["seconds"] = round(time.time() - started, 1)
        with open(path, "w") as fh:
            json.dump(dict(meta=meta, records=records), fh, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
