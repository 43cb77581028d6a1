"""Issue 15, fifth session: the Gluon kernel (``results/gluon_staged.py``: a persistent program per SM, the next
row copied into shared memory with cp.async while this one is reduced and stored) on the H200. First
correctness (poisoned outputs against float64, over tails, views, -inf rows, all dtypes and settings), then the
sweep beside the dispatcher and a copy, timed as ``softmax-lab bench`` times (do_bench_cudagraph median, rep
20 ms, rotating buffers >= 512 MiB; every timed setting checked against float64 before and after).
Usage (GPU machine, repository root): ``python3 results/run-h200-gluon.py OUT.json``"""
import json
import sys
import time

import torch
import triton

sys.path.insert(0, "results")
import softmax_lab  # noqa: E402
from gluon_staged import staged_softmax  # noqa: E402
from softmax_lab import bench  # noqa: E402

F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16
NAMES = {F32: "float32", F16: "float16", BF16: "bfloat16"}
SETTINGS = [dict(STAGES=s, num_warps=w) for s in (1, 2, 3) for w in (32, 16)]  # (correctness)
SWEEP = [dict(STAGES=s, num_warps=w) for s in (1, 2, 3, 4, 5, 6) for w in (32, 16, 8)]
SHAPES = [(2048, 32768, BF16), (4096, 32768, BF16), (2048, 32768, F16), (1024, 65536, BF16), (4096, 16384, BF16),
          (8192, 16384, F16), (4096, 16384, F32), (8192, 8192, BF16)]


def fits(n_cols, dtype, knobs):
    block = 1 << (n_cols - 1).bit_length()
    per_thread = block // (32 * knobs["num_warps"])  # more than 64 elements a thread cannot stay in registers
    return (knobs["STAGES"] * block * dtype.itemsize <= 227 * 1024
            and 16 // dtype.itemsize <= per_thread <= 64)


def correctness():
    from softmax_lab.testing import tolerance

    failures, checked = [], 0
    for dtype in (F32, F16, BF16):
        for n_rows, n_cols, pad in [(1, 20000, 0), (3, 20001, 7), (300, 16385, 15), (133, 32768, 0), (5, 65536, 0),
                                    (17, 40000, 8), (1000, 9000, 0), (2, 65535, 1)]:
            big = torch.randn(n_rows, n_cols + pad, device="cuda", dtype=dtype) * 4
            x = big[:, :n_cols]
            if pad % (16 // dtype.itemsize):  # rows must start on 16 bytes: skip the views the kernel refuses
                x = torch.randn(n_rows, n_cols, device="cuda", dtype=dtype) * 4
                if n_cols % (16 // dtype.itemsize):
                    continue
            x[0, : n_cols // 2] = float("-inf")  # a long -inf run
            if n_rows > 2:
                x[2] = float("-inf")  # a fully -inf row: NaN, like torch
                x[1] = -1000.0 - torch.rand(n_cols, device="cuda")  # all negative
            want = torch.softmax(x.double(), -1)
            for knobs in SETTINGS:
                if not fits(n_cols, dtype, knobs):
                    continue
                for programs in (None, 7):
                    y = torch.full_like(x, float("nan"))
                    checked += 1
                    try:
                        staged_softmax(x, out=y, programs=programs, **knobs)
                    except Exception as err:
                        lines = [ln for ln in str(err).splitlines() if "error" in ln.lower()] or [str(err)]
                        failures.append(f"{NAMES[dtype]} {n_rows}x{n_cols} {knobs}: {type(err).__name__}: "
                                        f"{lines[0][:200]}")
                        break
                    atol, rtol = tolerance(dtype)
                    ok = torch.allclose(y.double(), want, atol=atol, rtol=rtol, equal_nan=True)
                    if not ok:
                        err = (y.double() - want).abs().nan_to_num(1e9).max().item()
                        failures.append(f"{NAMES[dtype]} {n_rows}x{n_cols}+{pad} {knobs} programs={programs}: "
                                        f"max err {err:.3g}")
    return checked, failures


def main(path):
    started = time.time()
    checked, failures = correctness()
    print(f"correctness: {checked} runs, {len(failures)} failures", *failures[:20], sep="\n  ", flush=True)
    meta = dict(device=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__,
                date=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                command="python3 results/run-h200-gluon.py " + " ".join(sys.argv[1:]),
                timing="do_bench_cudagraph median, rep 20 ms, rotating buffers >= 512 MiB; % of copy timed alike",
                correctness_runs=checked, correctness_failures=failures)
    records = []
    for n_rows, n_cols, dtype in SHAPES:
        moved = 2 * n_rows * n_cols * dtype.itemsize
        n_buf = max(2, min(16, -(-bench.ROTATE_BYTES // moved)))
        xs = bench._buffers((n_rows, n_cols), dtype, n_buf)
        outs = [torch.empty_like(xs[0]) for _ in range(n_buf)]
        copy = bench._time(lambda i: outs[i].copy_(xs[i]), n_buf, 20)
        base = dict(rows=n_rows, cols=n_cols, dtype=NAMES[dtype], bytes=moved, buffers=n_buf)
        records.append(dict(base, impl="copy", ms=copy, pct_copy=100.0))
        runs = [("dispatcher", {}, lambda i: softmax_lab.softmax(xs[i]))]
        runs += [("gluon staged", k, lambda i, k=k: staged_softmax(xs[i], out=outs[i], **k))
                 for k in SWEEP if fits(n_cols, dtype, k)]
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
