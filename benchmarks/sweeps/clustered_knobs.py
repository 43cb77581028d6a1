"""Issue 15, sixth session, second run: the clustered kernel with ``vectors`` and slices sized to the row (not a
power of two), the resident kernel with shared memory sized to the row, and the CPU cost of the Gluon kernels'
relaunch plans. First run: ``run-h200-clustered.py``; this one times the clustered kernel (``kernels/clustered.py``: a row split over a cluster of programs'
shared memories) beside the dispatcher, on the H200; and the relaunch plans of the Gluon kernels (eager time).
Correctness first (poisoned outputs against float64: tails, -inf slices, -inf rows, all-negative rows, in place,
every dtype and setting), then the sweep, timed as ``softmax-lab bench`` times (do_bench_cudagraph median, rep
20 ms, rotating buffers >= 512 MiB; each timed setting checked before and after), then eager loops.
Usage (GPU machine, repository root): ``python3 benchmarks/sweeps/clustered_knobs.py OUT.json``"""
import json
import sys
import time

import torch
import triton

import softmax_lab
from softmax_lab import bench, dispatch
from softmax_lab.kernels import clustered_softmax, resident_softmax
from softmax_lab.kernels.clustered import slices
from softmax_lab.testing import tolerance

F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16
NAMES = {F32: "float32", F16: "float16", BF16: "bfloat16"}
SETTINGS = [dict(parts=p, num_warps=w, vectors=v) for p in (2, 4, 8, 16)
            for w, v in ((1, 4), (2, 2), (2, 4), (4, 1), (4, 2))]
CHECKED = [dict(), dict(parts=4, num_warps=4, vectors=1), dict(parts=8, num_warps=2, vectors=2),
           dict(parts=16, num_warps=1, vectors=4), dict(parts=2, num_warps=8, vectors=1)]
SHAPES = [(1024, 65536, F32), (1024, 65536, BF16), (2048, 65536, BF16), (4096, 131072, BF16), (512, 131072, F32),
          (1024, 100000, F32), (2048, 24000, BF16), (4096, 20000, F16), (2048, 32768, BF16), (256, 262144, F32)]


def fits(n_cols, dtype, k):
    try:
        o = slices(n_cols, dtype.itemsize, **k)
    except ValueError:
        return False
    return o["SLICE"] * dtype.itemsize <= 227 * 1024


def correctness():
    failures, checked = [], 0
    for dtype in (F32, F16, BF16):
        atol, rtol = tolerance(dtype)
        for n_rows, n_cols in [(1, 40000), (3, 65536), (17, 100001), (5, 131072), (9, 262144), (2, 524288),
                               (300, 65537), (7, 20000), (33, 32768)]:
            vec = 16 // dtype.itemsize
            padded = torch.randn(n_rows, -(-n_cols // vec) * vec, device="cuda", dtype=dtype) * 4
            x = padded[:, :n_cols]
            x[0, : n_cols // 2] = float("-inf")  # whole slices of -inf
            if n_rows > 2:
                x[2] = float("-inf")
                x[1] = -1000.0 - torch.rand(n_cols, device="cuda")
            want = torch.softmax(x.double(), -1)
            for k in CHECKED:
                if not fits(n_cols, dtype, k):
                    continue
                for in_place in (False, True):
                    z = padded.clone()[:, :n_cols] if in_place else x
                    y = z if in_place else torch.full_like(x, float("nan"))
                    checked += 1
                    try:
                        clustered_softmax(z, out=y, **k)
                        if not torch.allclose(y.double(), want, atol=atol, rtol=rtol, equal_nan=True):
                            err = (y.double() - want).abs().nan_to_num(1e9).max().item()
                            failures.append(f"{NAMES[dtype]} {n_rows}x{n_cols} {k} in_place={in_place}: max err {err:.3g}")
                    except Exception as err:
                        failures.append(f"{NAMES[dtype]} {n_rows}x{n_cols} {k}: {type(err).__name__}: {str(err)[:200]}")
                    if in_place and k:
                        break
    for dtype in (F16, BF16):  # resident, shared memory sized to the row
        atol, rtol = tolerance(dtype)
        for n_rows, n_cols in [(7, 20000), (3, 24000), (300, 16385), (5, 30001), (64, 24576), (2, 40000)]:
            padded = torch.randn(n_rows, -(-n_cols // 8) * 8, device="cuda", dtype=dtype) * 4
            x = padded[:, :n_cols]
            x[0, : n_cols // 2] = float("-inf")
            x[-1] = -1000.0 - torch.rand(n_cols, device="cuda")
            want = torch.softmax(x.double(), -1)
            for k in (dict(), dict(num_warps=4, overlap=True), dict(num_warps=8, overlap=True), dict(num_warps=16)):
                y = torch.full_like(x, float("nan"))
                checked += 1
                resident_softmax(x, out=y, **k)
                if not torch.allclose(y.double(), want, atol=atol, rtol=rtol, equal_nan=True):
                    failures.append(f"resident {NAMES[dtype]} {n_rows}x{n_cols} {k}: wrong")
    # > 2**31 elements: 32769 rows of 65536 bf16 (the row offsets need 64 bits)
    x = torch.randn(32769, 65536, device="cuda", dtype=BF16)
    y = torch.full_like(x, float("nan"))
    clustered_softmax(x, out=y, parts=4, num_warps=2, vectors=2)
    rows = [0, 1, 16384, 32767, 32768]
    checked += 1
    if not torch.allclose(y[rows].double(), torch.softmax(x[rows].double(), -1), atol=tolerance(BF16)[0],
                          rtol=tolerance(BF16)[1]):
        failures.append("bfloat16 32769x65536 (> 2**31 elements): wrong")
    del x, y
    torch.cuda.empty_cache()
    return checked, failures


def time_shape(n_rows, n_cols, dtype, records):
    moved = 2 * n_rows * n_cols * dtype.itemsize
    n_buf = max(2, min(16, -(-bench.ROTATE_BYTES // moved)))
    xs = bench._buffers((n_rows, n_cols), dtype, n_buf)
    outs = [torch.empty_like(xs[0]) for _ in range(n_buf)]
    copy = bench._time(lambda i: outs[i].copy_(xs[i]), n_buf, 20)
    base = dict(rows=n_rows, cols=n_cols, dtype=NAMES[dtype], bytes=moved, buffers=n_buf)
    records.append(dict(base, impl="copy", ms=copy, pct_copy=100.0))
    runs = [("dispatcher", {"choice": softmax_lab.softmax.choose(n_rows, n_cols, dtype)[0]},
             lambda i: softmax_lab.softmax(xs[i]))]
    runs += [("clustered", k, lambda i, k=k: clustered_softmax(xs[i], out=outs[i], **k))
             for k in SETTINGS if fits(n_cols, dtype, k)]
    if n_cols <= 32768 and dtype != F32:
        runs += [("resident", k, lambda i, k=k: resident_softmax(xs[i], out=outs[i], **k))
                 for k in (dict(num_warps=8, overlap=True), dict(num_warps=4, overlap=True))]
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


def eager(records):
    """softmax_lab.softmax in a Python loop, with the Gluon kernel through its relaunch plan and without
    (the plans cleared before every call), beside torch.softmax."""
    from softmax_lab import op

    cases = [(2048, 32768, BF16, None), (1024, 65536, F32, ("clustered", dict(parts=4, num_warps=8))),
             (256, 262144, F32, ("clustered", dict(parts=16, num_warps=8))), (64, 32768, BF16, None),
             (8, 65536, F32, ("clustered", dict(parts=4, num_warps=8)))]
    saved = {k: list(v) for k, v in dispatch.FORWARD.items()}
    for n_rows, n_cols, dtype, rule in cases:
        size = 4 if dtype == F32 else 2
        dispatch.FORWARD[size] = ([(n_cols, rule)] if rule else []) + saved[size]
        moved = 2 * n_rows * n_cols * dtype.itemsize
        n_buf = max(2, min(16, -(-bench.ROTATE_BYTES // moved)))
        xs = bench._buffers((n_rows, n_cols), dtype, n_buf)
        gpu = bench._time(lambda i: softmax_lab.softmax(xs[i]), n_buf, 20)
        op._PLANS.clear()
        y = softmax_lab.softmax(xs[0])
        planned = len(op._PLANS)
        ok = bench._check(softmax_lab.softmax(xs[1]), xs[1]) or "ok"  # through the plan
        rec = dict(rows=n_rows, cols=n_cols, dtype=NAMES[dtype], choice=softmax_lab.softmax.choose(n_rows, n_cols, dtype)[0],
                   plans=planned, checked=ok, gpu_ms=gpu)
        rec["eager_ms"] = bench._time_eager(lambda i: softmax_lab.softmax(xs[i]), n_buf, gpu)

        rec["eager_unplanned_ms"] = bench._time_eager(lambda i: dispatch.softmax_2d(xs[i]), n_buf, gpu)
        rec["torch_eager_ms"] = bench._time_eager(lambda i: torch.softmax(xs[i], -1), n_buf, gpu)
        records.append(rec)
        print("eager", rec, flush=True)
        del xs, y
        torch.cuda.empty_cache()
        dispatch.FORWARD.update({k: list(v) for k, v in saved.items()})


def cpu_us(fn, n=400, loops=7):
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(loops):
        torch.cuda._sleep(200_000_000)  # ~100 ms of GPU time: the calls below only queue
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        ts.append((time.perf_counter() - t0) / n * 1e6)
        torch.cuda.synchronize()
    return sorted(ts)[loops // 2]


def cpu_costs(records):
    """CPU µs per call with the GPU held busy: the relaunch plans of fused, resident and clustered, the whole
    fast path, the launcher path, torch.softmax."""
    from softmax_lab.kernels import fused, resident
    from softmax_lab.kernels import clustered as cl
    from softmax_lab.kernels._launch import relauncher

    for n_rows, n_cols, dtype, name in [(8, 8192, BF16, "fused"), (8, 32768, BF16, "resident"),
                                        (8, 65536, F32, "clustered")]:
        x = torch.randn(n_rows, n_cols, device="cuda", dtype=dtype)
        y = torch.empty_like(x)
        setup = {"fused": fused.launch_setup, "resident": resident.launch_setup, "clustered": cl.launch_setup}[name]
        knobs = {"fused": dict(num_warps=16), "resident": dict(num_warps=8, overlap=True),
                 "clustered": dict(parts=4)}[name]
        kernel, grid, args, options = setup(y, x, **knobs)
        run = relauncher(kernel, grid, args, per_call=3 if name == "clustered" else 2, **options)
        xp, yp = x.data_ptr(), y.data_ptr()
        more = (args[2].data_ptr(),) if name == "clustered" else ()
        rec = dict(rows=n_rows, cols=n_cols, dtype=NAMES[dtype], kernel=name)
        rec["relaunch CPU us"] = cpu_us(lambda: run(yp, xp, *more))
        rec["kernel[grid](...) CPU us"] = cpu_us(lambda: kernel[grid](*args, **options))
        rec["torch.softmax CPU us"] = cpu_us(lambda: torch.softmax(x, -1))
        records.append(rec)
        print("cpu", rec, flush=True)


def main(path):
    started = time.time()
    meta = dict(device=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__,
                date=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                command="python3 benchmarks/sweeps/clustered_knobs.py " + " ".join(sys.argv[1:]),
                timing="do_bench_cudagraph median, rep 20 ms, rotating buffers >= 512 MiB; % of copy timed alike")
    records, eager_records = [], []

    def save():
        meta["seconds"] = round(time.time() - started, 1)
        with open(path, "w") as fh:
            json.dump(dict(meta=meta, records=records, eager=eager_records), fh, indent=1)

    checked, failures = correctness()
    meta.update(correctness_runs=checked, correctness_failures=failures)
    print(f"correctness: {checked} runs, {len(failures)} failures", *failures[:20], sep="\n  ", flush=True)
    save()
    for n_rows, n_cols, dtype in SHAPES:
        time_shape(n_rows, n_cols, dtype, records)
        torch.cuda.empty_cache()
        save()
    eager(eager_records)
    save()
    cpu_costs(eager_records)
    save()


if __name__ == "__main__":
    main(sys.argv[1])
