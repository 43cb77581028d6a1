"""Round 13: how often a clustered_tma form gives a wrong row, every row of fresh inputs checked against float64.
GPU machine, repository root:

    PYTHONPATH=code python3 benchmarks/sweeps/tma_race.py            # the held form, the dispatcher's settings
    PYTHONPATH=code python3 benchmarks/sweeps/tma_race.py --stream   # the streamed form (sweeps/clustered_tma.py)

``--stream`` is the second of round 13's two probes (h200-tma-race-2-round13.log: 53-124 wrong rows in 20 × 1024,
with or without a whole-cluster barrier after the exchange or before the programs leave); the first
(h200-tma-race-1-round13.log) ran the library's held form at 1024×65536 bf16 (0 of 20,480 rows wrong), its streamed
form (55 and 98) and the sweep's (78, and 0 for its held form). The held probe over every setting below was written
after the device time had run out: not run yet.
"""
import os
import sys

import torch

from softmax_lab.kernels import clustered_tma_softmax

F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16


def bad_rows(y, x):
    ref = torch.softmax(x.double(), -1)
    tol = (1e-6, 1e-5) if x.dtype == F32 else (1e-3, 2e-2)
    return int((~torch.isclose(y.double(), ref, atol=tol[0], rtol=tol[1], equal_nan=True).all(dim=1)).sum())


SETTINGS = [(1024, 65536, BF16, 8, 4), (1024, 60000, F16, 8, 4), (1024, 81920, BF16, 8, 4), (1024, 65536, F32, 8, 8),
            (1024, 50000, F32, 8, 8), (512, 100000, F32, 16, 4), (512, 128256, F32, 16, 4), (256, 151936, F32, 8, 8),
            (256, 163840, F32, 8, 8)]


def held_probe():
    for n_rows, n, dtype, parts, warps in SETTINGS:
        counts = []
        for _ in range(50):
            x = (3 * torch.randn(n_rows, n, device="cuda")).to(dtype)
            y = torch.full_like(x, float("nan"))
            clustered_tma_softmax(x, out=y, parts=parts, num_warps=warps)
            counts.append(bad_rows(y, x))
        print(f"{n_rows}x{n} {str(dtype)[6:]:9s} {parts}x{warps} held: bad rows in 50 inputs: {sum(counts)}",
              flush=True)


def stream_probe():
    import triton

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import clustered_tma as sweep

    def form(parts, fix):
        return lambda x, y: sweep.tma_softmax(x, y, parts, 4, "stream", fix=fix)

    forms = {"sweep stream 4x4 65536": (65536, form(4, 0)),
             "... + cluster barrier after exchange": (65536, form(4, 1)),
             "... + cluster barrier at the end": (65536, form(4, 2)),
             "stream 8x4 128256 + barrier at end": (128256, form(8, 2)),
             "stream 8x4 128256 + after exchange": (128256, form(8, 1))}
    for name, (n, f) in forms.items():
        counts = []
        for _ in range(20):
            x = (3 * torch.randn(1024, n, device="cuda")).bfloat16()
            y = torch.full_like(x, float("nan"))
            f(x, y)
            counts.append(bad_rows(y, x))
        print(f"{name:36s} bad rows in 20 x 1024: {sum(counts)} {counts}", flush=True)
    for name, (n, f) in forms.items():  # rough timing (one 1024-row input, 128-256 MB, past the L2)
        x = (3 * torch.randn(1024, n, device="cuda")).bfloat16()
        y = torch.empty_like(x)
        copy = triton.testing.do_bench(lambda: y.copy_(x), rep=200)
        ms = triton.testing.do_bench(lambda: f(x, y), rep=200)
        print(f"{name:36s} {100 * copy / ms:5.1f}% of copy (rough)", flush=True)


if __name__ == "__main__":
    stream_probe() if "--stream" in sys.argv else held_probe()
