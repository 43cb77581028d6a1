"""Issue 15, sixth session, fourth run: the exp-once probe of the clustered kernel
(``results/gluon_clustered_once.py``: exp(x - max) kept in float32 shared memory) beside the clustered kernel and the dispatcher. Correctness first (poisoned
outputs against float64), then the sweep timed as ``softmax-lab bench`` times (do_bench_cudagraph median, rep 20 ms,
rotating buffers >= 512 MiB; each timed setting checked before and after).
Usage (GPU machine, repository root): ``python3 results/run-h200-once.py OUT.json``"""
import json
import sys
import time

import torch
import triton

sys.path.insert(0, "results")
import softmax_lab  # noqa: E402
from softmax_lab import bench  # noqa: E402
from softmax_lab.kernels import clustered_softmax  # noqa: E402
from softmax_lab.testing import tolerance  # noqa: E402
from gluon_clustered_once import once_softmax  # noqa: E402

F32, BF16 = torch.float32, torch.bfloat16
NAMES = {F32: "float32", BF16: "bfloat16"}
GRID = [dict(parts=p, num_warps=w, vectors=v) for p in (2, 4, 8, 16) for w, v in ((4, 1), (4, 2), (2, 2), (8, 1))]
CASES = {  # shape: (best clustered setting of h200-clustered-b.json, the probe's settings)
    (1024, 65536, BF16): (dict(parts=4, num_warps=4, vectors=2), GRID),
    (2048, 65536, BF16): (dict(parts=4, num_warps=4, vectors=2), GRID),
    (1024, 65536, F32): (dict(parts=8, num_warps=2, vectors=2), GRID),
    (4096, 131072, BF16): (dict(parts=4, num_warps=4, vectors=1), GRID),
    (2048, 32768, BF16): (dict(parts=2, num_warps=4, vectors=2), GRID),
}


def correctness():
    failures, checked = [], 0
    for dtype in (F32, BF16):
        atol, rtol = tolerance(dtype)
        for n_rows, n_cols in [(1, 40000), (3, 65536), (17, 100001), (300, 65537), (1000, 32768), (5, 262144)]:
            padded = torch.randn(n_rows, -(-n_cols // 8) * 8, device="cuda", dtype=dtype) * 4
            x = padded[:, :n_cols]
            x[0, : n_cols // 2] = float("-inf")
            if n_rows > 2:
                x[2] = float("-inf")
                x[1] = -1000.0 - torch.rand(n_cols, device="cuda")
            want = torch.softmax(x.double(), -1)
            for k in (dict(parts=8, num_warps=4, vectors=2), dict(parts=16, num_warps=2, vectors=2)):
                y = torch.full_like(x, float("nan"))
                checked += 1
                try:
                    once_softmax(x, out=y, **k)
                    if not torch.allclose(y.double(), want, atol=atol, rtol=rtol, equal_nan=True):
                        err = (y.double() - want).abs().nan_to_num(1e9).max().item()
                        failures.append(f"{NAMES[dtype]} {n_rows}x{n_cols} {k}: max err {err:.3g}")
                except Exception as err:
                    failures.append(f"{NAMES[dtype]} {n_rows}x{n_cols} {k}: {type(err).__name__}: {str(err)[:200]}")
    return checked, failures


def main(path):
    started = time.time()
    checked, failures = correctness()
    print(f"correctness: {checked} runs, {len(failures)} failures", *failures[:20], sep="\n  ", flush=True)
    meta = dict(device=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__,
                date=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                command="python3 results/run-h200-once.py " + " ".join(sys.argv[1:]),
                timing="do_bench_cudagraph median, rep 20 ms, rotating buffers >= 512 MiB; % of copy timed alike",
                correctness_runs=checked, correctness_failures=failures)
    records = []
    for (n_rows, n_cols, dtype), (best, rings) in CASES.items():
        moved = 2 * n_rows * n_cols * dtype.itemsize
        n_buf = max(2, min(16, -(-bench.ROTATE_BYTES // moved)))
        xs = bench._buffers((n_rows, n_cols), dtype, n_buf)
        outs = [torch.empty_like(xs[0]) for _ in range(n_buf)]
        copy = bench._time(lambda i: outs[i].copy_(xs[i]), n_buf, 20)
        base = dict(rows=n_rows, cols=n_cols, dtype=NAMES[dtype], bytes=moved, buffers=n_buf)
        records.append(dict(base, impl="copy", ms=copy, pct_copy=100.0))
        runs = [("dispatcher", {"choice": softmax_lab.softmax.choose(n_rows, n_cols, dtype)[0]},
                 lambda i: softmax_lab.softmax(xs[i])),
                ("clustered", best, lambda i: clustered_softmax(xs[i], out=outs[i], **best))]
        runs += [("once", k, lambda i, k=k: once_softmax(xs[i], out=outs[i], **k)) for k in rings]
        for name, knobs, fn in runs:
            rec = dict(base, impl=name, knobs=knobs)
            try:
                outs[0].fill_(float("nan"))
                bad = bench._check(fn(0), xs[0])
                rec["ms"] = bench._time(fn, n_buf, 20)
                rec["pct_copy"] = 100 * copy / rec["ms"]
                outs[-1].fill_(float("nan"))
                rec["checked"] = bad or bench._check(fn(n_buf - 1), xs[n_buf - 1]) or "ok"
            except Exception as err:
                rec["error"] = f"{type(err).__name__}: {err}"[:300]
                torch.cuda.synchronize()
            records.append(rec)
            print(n_rows, n_cols, NAMES[dtype], name, knobs, f"{rec.get('pct_copy', 0):.1f}%", rec.get("checked", ""),
                  rec.get("error", ""), flush=True)
        xs = outs = None
        torch.cuda.empty_cache()
        meta["seconds"] = round(time.time() - started, 1)
        with open(path, "w") as fh:
            json.dump(dict(meta=meta, records=records), fh, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
