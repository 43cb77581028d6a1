"""Issue 15, fourth session: the staged kernels (``results/probe_staged.py``: TMA copies pipelined by Triton, a fixed
set of resident programs, (m, l) exchanged as one 64-bit word) swept on the long-row shapes, beside the
dispatcher of the same commit; forward and backward. Timing and checks as in ``softmax-lab bench``
(``do_bench_cudagraph`` median, rep 20 ms, rotating buffers >= 512 MiB, a copy of the same bytes = 100%;
every setting's poisoned output compared with float64 on 3 rows before and after timing). Settings are
compiled first by worker processes (Triton's disk cache). Writes the JSON after every shape.
Usage (GPU machine, repository root): ``python3 results/run-h200-issue15d.py OUT.json [quick]``"""
import concurrent.futures as cf
import json
import multiprocessing as mp
import sys
import time

import torch

F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16
NAMES = {F32: "float32", F16: "float16", BF16: "bfloat16"}
FORWARD = [(2048, 32768, BF16), (1024, 65536, F32), (1024, 65536, BF16), (256, 262144, F32), (16, 1048576, F32),
           (8, 4194304, F32), (4096, 131072, BF16), (2048, 32768, F16), (4096, 16384, F32), (8192, 8192, BF16),
           (16384, 4096, F32)]
BACKWARD = [(1024, 65536, F32), (16, 1048576, F32), (256, 262144, F32), (4096, 16384, F32)]
# (bytes of input per chunk, STAGES, num_warps)
FWD_SETTINGS = [(16384, 2, 4), (16384, 3, 4), (16384, 4, 4), (16384, 3, 8), (32768, 2, 8), (32768, 3, 8),
                (32768, 2, 16), (32768, 3, 16), (65536, 2, 16), (65536, 3, 16), (65536, 2, 32)]
BWD_SETTINGS = [(8192, 2, 4), (8192, 3, 4), (16384, 2, 8), (16384, 3, 8), (16384, 2, 16), (32768, 2, 16),
                (32768, 2, 32)]


def candidates(kind, n_rows, n_cols, dtype):
    uniq = []
    for nbytes, stages, warps in (FWD_SETTINGS if kind == "forward" else BWD_SETTINGS):
        knobs = dict(BLOCK=min(nbytes // dtype.itemsize, 1 << (n_cols - 1).bit_length()), STAGES=stages,
                     num_warps=warps)
        if knobs not in uniq:
            uniq.append(knobs)
    return uniq


def compile_one(spec):
    kind, n_rows, n_cols, dtype_name, knobs = spec
    sys.path.insert(0, "results")
    from probe_staged import staged_backward, staged_softmax
    try:
        x = torch.zeros((n_rows, n_cols), dtype=getattr(torch, dtype_name), device="cuda")
        if kind == "forward":
            staged_softmax(x, out=torch.empty_like(x), **knobs)
        else:
            staged_backward(x, x, torch.empty_like(x), **knobs)
        torch.cuda.synchronize()
        return ""
    except Exception as err:
        return f"{type(err).__name__}: {err}"[:300]


def main(path):
    import triton

    import softmax_lab
    from softmax_lab import bench
    from softmax_lab.kernels import softmax_backward

    sys.path.insert(0, "results")
    import probe_staged as staged
    from probe_staged import staged_backward, staged_softmax

    quick = "quick" in sys.argv
    fwd, bwd = (FORWARD[:3], BACKWARD[:1]) if quick else (FORWARD, BACKWARD)
    specs = [("forward", r, c, NAMES[d], k) for r, c, d in fwd for k in candidates("forward", r, c, d)]
    specs += [("backward", r, c, NAMES[d], k) for r, c, d in bwd for k in candidates("backward", r, c, d)]
    started = time.time()
    with cf.ProcessPoolExecutor(14, mp_context=mp.get_context("spawn")) as pool:
        errors = list(pool.map(compile_one, specs))
    print(f"compiled {len(specs)} settings in {time.time() - started:.1f} s; errors:",
          [(s, e) for s, e in zip(specs, errors) if e], flush=True)
    props = torch.cuda.get_device_properties(0)
    meta = dict(device=torch.cuda.get_device_name(), sms=props.multi_processor_count,
                torch=torch.__version__, triton=triton.__version__, cuda=torch.version.cuda,
                date=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                command="python3 results/run-h200-issue15d.py " + " ".join(sys.argv[1:]),
                timing="do_bench_cudagraph median, rep 20 ms, rotating buffers >= 512 MiB; % of copy timed alike",
                correctness="poisoned output compared with float64 on 3 rows, first buffer before timing, last after")
    records = []
    for kind, shapes in (("forward", fwd), ("backward", bwd)):
        for n_rows, n_cols, dtype in shapes:
            moved = (2 if kind == "forward" else 3) * n_rows * n_cols * dtype.itemsize
            n_buf = max(2, min(16, -(-bench.ROTATE_BYTES // moved)))
            xs = bench._buffers((n_rows, n_cols), dtype, n_buf)
            outs = [torch.empty_like(xs[0]) for _ in range(n_buf)]
            if kind == "backward":
                ys = [torch.softmax(x.float(), -1).to(dtype) for x in xs]
                dys = bench._buffers((n_rows, n_cols), dtype, n_buf)
                copy = bench._time(lambda i: torch.add(ys[i], dys[i], out=outs[i]), n_buf, 20)
                check = lambda y, i: bench._check(y, ys[i], "backward", dys[i])  # noqa: E731
                runs = [("dispatcher", {}, lambda i: softmax_backward(ys[i], dys[i], out=outs[i]))]
                runs += [("staged", k, lambda i, k=k: staged_backward(ys[i], dys[i], outs[i], **k))
                         for k in candidates(kind, n_rows, n_cols, dtype)]
            else:
                copy = bench._time(lambda i: outs[i].copy_(xs[i]), n_buf, 20)
                check = lambda y, i: bench._check(y, xs[i])  # noqa: E731
                runs = [("dispatcher", {}, lambda i: softmax_lab.softmax(xs[i]))]
                runs += [("staged", k, lambda i, k=k: staged_softmax(xs[i], out=outs[i], **k))
                         for k in candidates(kind, n_rows, n_cols, dtype)]
            base = dict(kind=kind, rows=n_rows, cols=n_cols, dtype=NAMES[dtype], bytes=moved, buffers=n_buf)
            records.append(dict(base, impl="copy", ms=copy, gbps=moved / copy / 1e6, pct_copy=100.0))
            for name, knobs, fn in runs:
                rec = dict(base, impl=name, knobs=knobs)
                if name == "dispatcher" and kind == "forward":
                    rec["choice"] = softmax_lab.softmax.choose(n_rows, n_cols, dtype)[0]
                for attempt in ("cooperative launch", "plain launch"):
                    staged.COOPERATIVE_LAUNCH = attempt == "cooperative launch"
                    try:
                        outs[0].fill_(float("nan"))
                        bad = check(fn(0), 0)
                        rec["ms"] = bench._time(fn, n_buf, 20)
                        rec["gbps"] = moved / rec["ms"] / 1e6
                        rec["pct_copy"] = 100 * copy / rec["ms"]
                        outs[-1].fill_(float("nan"))
                        rec["checked"] = bad or check(fn(n_buf - 1), n_buf - 1) or "ok"
                        rec["launch"] = attempt
                        rec.pop("error", None)
                        break
                    except Exception as err:
                        rec["error"] = f"{attempt}: {type(err).__name__}: {err}"[:300]
                        torch.cuda.synchronize()
                staged.COOPERATIVE_LAUNCH = True
                records.append(rec)
                print(kind, n_rows, n_cols, NAMES[dtype], name, rec.get("choice", ""), knobs,
                      f"{rec.get('pct_copy', 0):.1f}%", rec.get("checked", ""), rec.get("launch", ""),
                      rec.get("error", ""), flush=True)
            xs = outs = ys = dys = None
            torch.cuda.empty_cache()
            meta["seconds"] = round(time.time() - started, 1)
            with open(path, "w") as fh:
                json.dump(dict(meta=meta, records=records), fh, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
