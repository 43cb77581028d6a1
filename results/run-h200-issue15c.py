"""Issue 15, third session: a knob sweep of the cooperative / pipelined kernels on the long-row shapes below their
targets, and the new L2 re-read kernel (``kernels/l2_reread.py``) beside them. GPU time as in
``softmax-lab bench`` (``do_bench_cudagraph`` median over rotating buffers of >= 512 MiB; a device-to-device
copy of the same bytes timed the same way = 100%); every setting checked against a float64 softmax on 3 rows
before and after it is timed. The kernels are compiled first in parallel worker processes (Triton's disk
cache), so the device time goes to timing. Writes the JSON after every shape.
Usage (GPU machine, repository root): ``python3 results/run-h200-issue15c.py OUT.json [--confirm]``
(``--confirm``: only the shapes whose dispatcher rule changed, the old rule's setting against the new)."""
import concurrent.futures as cf
import json
import multiprocessing as mp
import sys
import time

import torch

F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16
NAMES = {F32: "float32", F16: "float16", BF16: "bfloat16"}
SHAPES = [(16, 1048576, F32), (8, 4194304, F32), (256, 262144, F32), (1024, 65536, F32), (2048, 32768, BF16),
          (1024, 65536, BF16), (4096, 131072, BF16), (2048, 32768, F16)]
SMS = 132  # the H200's; checked against the device below


def candidates(n_rows, n_cols, dtype):
    """(kernel, knobs) for one shape: the cooperative kernel's BLOCK/warps, the pipelined kernel's grid, and
    the L2 re-read kernel's BLOCK / warps / programs per SM / tiles per chunk."""
    wide = dtype == F32
    out = [("cooperative", dict(BLOCK=b, num_warps=w)) for b, w in
           (((8192, 4), (8192, 8), (16384, 16)) if wide else ((4096, 4), (8192, 4), (8192, 8), (16384, 8),
                                                                (16384, 16)))]
    if not wide and n_cols <= 131072:
        out += [("pipelined", dict(BLOCK=4096, num_warps=4, programs=p)) for p in (None, 4 * SMS, 8 * SMS)]
    for b, w, per_sm, tiles in ((4096, 4, 4, None), (2048, 4, 8, None), (4096, 8, 4, None), (8192, 8, 2, None),
                                (4096, 4, 8, 1), (8192, 8, 4, 1), (2048, 2, 16, 1), (16384, 16, 1, None)):
        if b < n_cols:
            out.append(("l2_reread", dict(BLOCK=b, num_warps=w, programs=per_sm * SMS, tiles=tiles)))
    if dtype == F16:  # fp16 behaves like bf16 in memory: the dispatcher and a few settings only
        out = [c for c in out if c[1].get("BLOCK") == 4096 and c[1].get("num_warps") == 4]
    return out


# --confirm: after the dispatcher took the winners, time it against the old rule's setting and the winner.
OLD_AND_NEW = [("cooperative", dict(BLOCK=8192, num_warps=8)), ("l2_reread", dict(BLOCK=8192, num_warps=8))]
CONFIRM = {(8, 4194304, F32): OLD_AND_NEW, (16, 1048576, F32): OLD_AND_NEW,
           (4096, 131072, BF16): [("cooperative", dict(BLOCK=4096, num_warps=4)),
                                  ("cooperative", dict(BLOCK=8192, num_warps=4))]}


def launcher(name):
    from softmax_lab.kernels import LONG_ROWS

    return LONG_ROWS[name]


def compile_one(spec):
    """Worker: run one setting once on zeros of the real shape (fills Triton's disk cache); '' or the error."""
    n_rows, n_cols, dtype_name, name, knobs = spec
    try:
        x = torch.zeros((n_rows, n_cols), dtype=getattr(torch, dtype_name), device="cuda")
        launcher(name)(x, out=torch.empty_like(x), **knobs)
        torch.cuda.synchronize()
        return ""
    except Exception as err:
        return f"{type(err).__name__}: {err}"[:200]


def main(path):
    import triton

    import softmax_lab
    from softmax_lab import bench

    global SHAPES, candidates
    if "--confirm" in sys.argv:
        SHAPES = list(CONFIRM)
        candidates = lambda r, c, d: CONFIRM[(r, c, d)]  # noqa: E731
    props = torch.cuda.get_device_properties(0)
    assert props.multi_processor_count == SMS, props.multi_processor_count
    specs = [(r, c, NAMES[d], n, k) for r, c, d in SHAPES for n, k in candidates(r, c, d)]
    started = time.time()
    with cf.ProcessPoolExecutor(12, mp_context=mp.get_context("spawn")) as pool:
        compiled = list(pool.map(compile_one, specs))
    print(f"compiled {len(specs)} settings in {time.time() - started:.1f} s; errors:",
          [(s[:2], s[3], s[4], e) for s, e in zip(specs, compiled) if e], flush=True)
    meta = dict(device=torch.cuda.get_device_name(), sms=SMS, l2_bytes=getattr(props, "L2_cache_size", None),
                torch=torch.__version__, triton=triton.__version__, cuda=torch.version.cuda,
                date=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                command="python3 results/run-h200-issue15c.py " + " ".join(sys.argv[1:]),
                timing="do_bench_cudagraph median, rep 20 ms, rotating buffers >= 512 MiB; % of copy timed alike",
                correctness="each result compared with a float64 softmax on 3 rows (first, middle, last), on the "
                            "first buffer before timing and the last buffer after",
                dispatcher={f"{r}x{c} {NAMES[d]}": softmax_lab.softmax.choose(r, c, d)[0] for r, c, d in SHAPES})
    records = []
    for n_rows, n_cols, dtype in SHAPES:
        moved = 2 * n_rows * n_cols * dtype.itemsize
        n_buf = max(2, min(16, -(-bench.ROTATE_BYTES // moved)))
        xs = bench._buffers((n_rows, n_cols), dtype, n_buf)
        outs = [torch.empty_like(xs[0]) for _ in range(n_buf)]
        copy = bench._time(lambda i: outs[i].copy_(xs[i]), n_buf, 20)
        base = dict(rows=n_rows, cols=n_cols, dtype=NAMES[dtype], bytes=moved, buffers=n_buf)
        records.append(dict(base, impl="copy", ms=copy, gbps=moved / copy / 1e6, pct_copy=100.0))
        for name, knobs in [("dispatcher", {})] + candidates(n_rows, n_cols, dtype):
            if name == "dispatcher":
                fn = lambda i: softmax_lab.softmax(xs[i])  # noqa: E731
            else:
                fn = lambda i, f=launcher(name), k=knobs: f(xs[i], out=outs[i], **k)  # noqa: E731
            rec = dict(base, impl=name, knobs=knobs)
            if name == "dispatcher":
                rec["choice"] = softmax_lab.softmax.choose(n_rows, n_cols, dtype)[0]
            try:
                outs[0].fill_(float("nan"))  # poisoned outputs: a chunk left unwritten fails the checks
                bad = bench._check(fn(0), xs[0])
                rec["ms"] = bench._time(fn, n_buf, 20)
                rec["gbps"] = moved / rec["ms"] / 1e6
                rec["pct_copy"] = 100 * copy / rec["ms"]
                outs[-1].fill_(float("nan"))
                rec["checked"] = bad or bench._check(fn(n_buf - 1), xs[n_buf - 1]) or "ok"
            except Exception as err:
                rec["error"] = f"{type(err).__name__}: {err}"[:300]
            records.append(rec)
            print(n_rows, n_cols, NAMES[dtype], name, knobs, f"{rec.get('pct_copy', 0):.1f}%",
                  f"{rec.get('gbps', 0):.0f} GB/s", rec.get("checked", ""), rec.get("error", ""), flush=True)
        xs = outs = None
        torch.cuda.empty_cache()
        meta["seconds"] = round(time.time() - started, 1)
        with open(path, "w") as fh:
            json.dump(dict(meta=meta, records=records), fh, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
