"""Probe: the unaligned kernels' knobs on the odd widths of issue 28, beside copy, torch and the register kernels
with one element per access (what ran before). GPU only; prints a table and writes JSON to the folder given."""
import json
import math
import sys
import time

import torch

import softmax_lab
from softmax_lab.bench import ROTATE_BYTES, _buffers, _check, _time
from softmax_lab.kernels import cooperative_backward, cooperative_softmax, fused_softmax, multirow_softmax
from softmax_lab.kernels.unaligned import unaligned_backward, unaligned_cooperative_softmax, unaligned_softmax

F32, BF16 = torch.float32, torch.bfloat16
out_dir = sys.argv[1] if len(sys.argv) > 1 else "."
records = []


def bench(label, shape, dtype, fns, view_pad=0, kind="forward"):
    n_rows, n_cols = shape
    moved = (2 if kind == "forward" else 3) * n_rows * n_cols * (2 if dtype == BF16 else 4)
    n_buf = max(2, min(16, math.ceil(ROTATE_BYTES / moved)))
    if view_pad:
        bigs = _buffers((n_rows, n_cols + view_pad), dtype, n_buf)
        xs = [b[:, 1:1 + n_cols] for b in bigs]
    else:
        xs = _buffers(shape, dtype, n_buf)
    outs = [torch.empty(shape, dtype=dtype, device="cuda") for _ in range(n_buf)]
    if kind == "backward":
        ys = [torch.softmax(x.float(), -1).to(dtype) for x in xs]
        dys = _buffers(shape, dtype, n_buf)
    plain = _buffers(shape, dtype, n_buf) if view_pad else xs  # copy: contiguous buffers of the same bytes
    copy = _time(lambda i: outs[i].copy_(plain[i]) if kind == "forward" else torch.add(ys[i], dys[i], out=outs[i]),
                 n_buf, 50)
    for name, fn in fns.items():
        rec = dict(label=label, shape=shape, dtype=str(dtype), impl=name, kind=kind)
        try:
            if kind == "forward":
                f = lambda i, fn=fn: fn(xs[i], outs[i])
                bad = _check(f(0), xs[0]) or _check(f(n_buf - 1), xs[n_buf - 1])
            else:
                f = lambda i, fn=fn: fn(ys[i], dys[i], outs[i])
                bad = _check(f(0), ys[0], "backward", dys[0])
            ms = _time(f, n_buf, 50)
            rec.update(ms=ms, pct=100 * copy / ms, checked=bad or "ok")
        except Exception as err:
            rec["error"] = f"{type(err).__name__}: {err}"[:200]
        records.append(rec)
        print(f"{label:28s} {name:40s} {rec.get('pct', float('nan')):6.1f}%  {rec.get('ms', 0) * 1e3:8.1f} us {rec.get('checked', rec.get('error'))}", flush=True)


def tiles(rows_warps):
    return {f"unaligned ROWS={r} w={w}": (lambda x, o, r=r, w=w: unaligned_softmax(x, out=o, ROWS=r, num_warps=w))
            for r, w in rows_warps}


t0 = time.time()
base = {"torch": lambda x, o: torch.softmax(x, -1)}
def ucoop(pairs):
    return {f"ucoop B={b} w={w}": (lambda x, o, b=b, w=w: unaligned_cooperative_softmax(x, out=o, BLOCK=b, num_warps=w))
            for b, w in pairs}


def ubwd(pairs):
    return {f"ubwd B={b} w={w}": (lambda y, dy, o, b=b, w=w: unaligned_backward(y, dy, o, BLOCK=b, num_warps=w))
            for b, w in pairs}


def ubwd_tiles(pairs):
    return {f"ubwd R={r} w={w}": (lambda y, dy, o, r=r, w=w: unaligned_backward(y, dy, o, ROWS=r, num_warps=w))
            for r, w in pairs}


tb = lambda y, dy, o: torch._softmax_backward_data(dy, y, -1, y.dtype)  # noqa: E731
bench("2048x50257 bf16", (2048, 50257), BF16, {**base, **ucoop([(2048, 2), (2048, 4), (4096, 2), (4096, 4),
                                                                  (4096, 8), (8192, 4), (8192, 8)])})
bench("100000x77 fp32", (100000, 77), F32, {**base, **tiles([(8, 1), (8, 2), (16, 2), (16, 4), (32, 4)])})
bench("65536x130 bf16", (65536, 130), BF16, {
    **base, "multirow (old)": lambda x, o: multirow_softmax(x, out=o, ROWS=4, num_warps=2),
    **tiles([(2, 1), (4, 1), (4, 2), (8, 2), (8, 4), (16, 4), (32, 4)])})
bench("32768x1000 fp32 view stride 1003", (32768, 1000), F32, {
    **base, "multirow (old)": lambda x, o: multirow_softmax(x, out=o, ROWS=1, num_warps=4),
    **tiles([(1, 2), (1, 4), (2, 4), (4, 4)])}, view_pad=3)
bench("8192x4100 bf16", (8192, 4100), BF16, {
    **base, "fused (old)": lambda x, o: fused_softmax(x, out=o, num_warps=8),
    **tiles([(1, 4), (1, 8), (2, 8), (1, 16)])})
bench("1024x50257 fp32", (1024, 50257), F32, {
    **base, "cooperative (old)": lambda x, o: cooperative_softmax(x, out=o, BLOCK=8192, num_warps=4),
    **ucoop([(2048, 2), (4096, 4), (8192, 4), (8192, 8)])})
bench("bwd 2048x50257 bf16", (2048, 50257), BF16, {"torch": tb, **ubwd([(2048, 2), (4096, 2), (4096, 4),
                                                                          (8192, 4), (8192, 8)])}, kind="backward")
bench("bwd 65536x130 bf16", (65536, 130), BF16, {"torch": tb, **ubwd_tiles([(4, 2), (8, 2), (8, 4), (16, 4)])},
      kind="backward")
bench("bwd 100000x77 fp32", (100000, 77), F32, {"torch": tb, **ubwd_tiles([(16, 2), (32, 4), (32, 8)])},
      kind="backward")
meta = dict(device=torch.cuda.get_device_name(), torch=torch.__version__, seconds=time.time() - t0)
json.dump(dict(meta=meta, records=records), open(f"{out_dir}/odd-widths-probe.json", "w"), indent=1)
print(meta)
