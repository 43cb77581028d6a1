"""Issue 15, seventh session: rows a little longer than a power of two (4104, 5000, 9000, 20008 elements; 200 and
600 in 16 bits). The register kernels' BLOCK is the next power of two, so up to half their lanes hold padding;
the resident kernel's shared memory is sized to the row. Every candidate against a copy of the same bytes;
GPU time from ``bench._time`` (CUDA graph, rotating buffers >= 512 MiB, median); each result checked against
float64 before and after timing.

    python3 benchmarks/sweeps/widths_past_powers_of_two.py OUT/h200-padding.json        # the first look
    python3 benchmarks/sweeps/widths_past_powers_of_two.py OUT/h200-padding-b.json b    # more lengths, to place the rules' limits
"""
import datetime
import json
import sys

import torch
import triton

sys.path.insert(0, "code")
import softmax_lab  # noqa: E402
from softmax_lab import bench  # noqa: E402
from softmax_lab.kernels import cooperative_softmax, fused_softmax, multirow_softmax, resident_softmax  # noqa: E402

BF, F32 = torch.bfloat16, torch.float32
FUSED = [("fused", fused_softmax, dict(num_warps=w)) for w in (4, 8, 16, 32)]
RESIDENT = [("resident", resident_softmax, dict(num_warps=w, overlap=True)) for w in (4, 8, 16)]
MULTI = [("multirow", multirow_softmax, dict(ROWS=r, num_warps=w)) for r in (1, 2, 4, 8) for w in (2, 4, 8)]
CASES = [((8192, 4104, BF), FUSED + RESIDENT), ((8192, 5000, BF), FUSED + RESIDENT),
         ((8192, 6000, BF), FUSED + RESIDENT), ((8192, 4100, F32), FUSED + RESIDENT),
         ((4096, 9000, F32), FUSED + RESIDENT), ((2048, 20008, F32), FUSED + RESIDENT +
                                                 [("cooperative", cooperative_softmax, dict(BLOCK=8192, num_warps=4))]),
         ((65536, 200, BF), MULTI), ((65536, 200, F32), MULTI), ((32768, 600, BF), MULTI)]
FEW = [("fused", fused_softmax, dict(num_warps=w)) for w in (4, 8, 16)]
LONG = [("fused", fused_softmax, dict(num_warps=w)) for w in (8, 16, 32)] + RESIDENT[1:2]
LONGER = [("fused", fused_softmax, dict(num_warps=32)), RESIDENT[1],
          ("cooperative", cooperative_softmax, dict(BLOCK=8192, num_warps=4))]
SHORT = [("multirow", multirow_softmax, dict(ROWS=r, num_warps=w)) for r, w in ((2, 2), (4, 2), (8, 4))]
SHORT_B = [("multirow", multirow_softmax, dict(ROWS=r, num_warps=w)) for r, w in ((1, 2), (2, 2), (2, 4))]
CASES_B = ([((8192, n, F32), FEW) for n in (5000, 6000, 7000, 8192)]
           + [((8192, n, BF), FEW) for n in (7000, 7600, 8192)]
           + [((4096, n, F32), LONG) for n in (12000, 16384)]
           + [((2048, n, F32), LONGER) for n in (17000, 24000, 28000, 32768)]
           + [((65536, n, BF), SHORT) for n in (130, 160, 256)]
           + [((32768, n, BF), SHORT_B) for n in (520, 800, 1000, 1024)])


def main(path, cases):
    out = dict(device=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__,
               date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
               command="python3 benchmarks/sweeps/widths_past_powers_of_two.py " + " ".join(sys.argv[1:]), records=[])
    for (n_rows, n_cols, dtype), candidates in cases:
        moved = 2 * n_rows * n_cols * torch.empty((), dtype=dtype).element_size()
        n_buf = max(2, min(16, -(-bench.ROTATE_BYTES // moved)))
        xs = bench._buffers((n_rows, n_cols), dtype, n_buf)
        outs = [torch.empty_like(x) for x in xs]
        copy = bench._time(lambda i: outs[i].copy_(xs[i]), n_buf, 20)
        base = dict(shape=f"{n_rows}x{n_cols}", dtype=str(dtype).split(".")[1])
        runs = [("dispatcher", lambda t, out=None: softmax_lab.softmax(t),
                 dict(choice=softmax_lab.softmax.choose(n_rows, n_cols, dtype)[0]))] + candidates
        for name, f, knobs in runs:
            rec = dict(base, impl=name, knobs=knobs)
            k = {} if name == "dispatcher" else knobs
            fn = lambda i, f=f, k=k: f(xs[i], out=outs[i], **k)  # noqa: E731
            try:
                bad = bench._check(fn(0), xs[0])
                ms = bench._time(fn, n_buf, 20)
                rec.update(pct_copy=100 * copy / ms, checked=bad or bench._check(fn(n_buf - 1), xs[n_buf - 1]) or "ok")
            except Exception as err:  # a setting that does not compile or fit
                rec["error"] = f"{type(err).__name__}: {err}"[:200]
            print(json.dumps(rec), flush=True)
            out["records"].append(rec)
        del xs, outs
        torch.cuda.empty_cache()
    with open(path, "w") as fh:
        json.dump(out, fh, indent=1)


if __name__ == "__main__":
    main(sys.argv[1], CASES_B if sys.argv[2:] == ["b"] else CASES)
