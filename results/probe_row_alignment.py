"""Probe (issue 15, sixth session): rows whose length is not a multiple of 64 elements (8200 bf16: rows 16-byte
aligned only) ran at 24-34% in run-h200-boundaries.py; copy, torch, fused and resident at nearby lengths."""
import torch, sys
sys.path.insert(0, "code")
import softmax_lab
from softmax_lab import bench
from softmax_lab.kernels import fused_softmax, resident_softmax
for n_rows, n_cols, dtype in [(8192, 8200, torch.bfloat16), (8192, 8192, torch.bfloat16), (8192, 8256, torch.bfloat16), (8192, 8320, torch.bfloat16), (4096, 9000, torch.bfloat16), (4096, 10000, torch.float16), (4096, 12000, torch.bfloat16), (2048, 16000, torch.bfloat16)]:
    moved = 2 * n_rows * n_cols * 2
    n_buf = max(2, min(16, -(-bench.ROTATE_BYTES // moved)))
    xs = bench._buffers((n_rows, n_cols), dtype, n_buf)
    outs = [torch.empty_like(xs[0]) for _ in range(n_buf)]
    copy = bench._time(lambda i: outs[i].copy_(xs[i]), n_buf, 20)
    line = [f"{n_rows}x{n_cols} copy {moved / copy / 1e6:.0f} GB/s"]
    for name, fn in [("torch", lambda i: torch.softmax(xs[i], -1)), ("fused32", lambda i: fused_softmax(xs[i], out=outs[i], num_warps=32)),
                     ("fused16", lambda i: fused_softmax(xs[i], out=outs[i], num_warps=16)), ("fused8", lambda i: fused_softmax(xs[i], out=outs[i], num_warps=8)),
                     ("resident8", lambda i: resident_softmax(xs[i], out=outs[i], num_warps=8, overlap=True)),
                     ("resident4", lambda i: resident_softmax(xs[i], out=outs[i], num_warps=4, overlap=True)),
                     ("resident16", lambda i: resident_softmax(xs[i], out=outs[i], num_warps=16, overlap=True))]:
        bad = bench._check(fn(0), xs[0])
        t = bench._time(fn, n_buf, 20)
        line.append(f"{name} {100 * copy / t:.0f}%{'' if not bad else ' BAD'}")
    print(" | ".join(line), flush=True)
    del xs, outs; torch.cuda.empty_cache()
