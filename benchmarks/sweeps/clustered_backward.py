"""The backward on a cluster of programs (``kernels/clustered_backward.py``) swept over its knobs, beside the
dispatcher (the cooperative kernels today), torch and a copy, at the LM widths whose backward misses 90% of copy
(1024×128256 bf16 at 82.2, 512×151936 fp32 at 88.3: docs/performance.md, round 7). GPU machine (sm_90), repository
root:

    PYTHONPATH=code python3 benchmarks/sweeps/clustered_backward.py OUT.json

``bench.compare``, kind ``backward`` (y + dy in, dx out; results checked against float64 before and after), after
an edge check (rows of one-hot y, y of zeros but one, dy of ±1e4, dx written over dy).
"""
import sys

import torch

from softmax_lab import bench
from softmax_lab.kernels.clustered_backward import clustered_backward


def edge_check(cases, run=clustered_backward):
    """One-hot rows of y, a y of zeros but one element, dy of ±1e4, and dx written over dy: against float64, for
    ``run(y, dy, out=..., **knobs)`` (also ``tma_backward.py``'s)."""
    bad = []
    for rows, cols, dtype, knobs in cases:
        y = torch.softmax(torch.randn(rows, cols, device="cuda") * 4, -1).to(dtype)
        y[0] = 0
        y[0, 7] = 1
        dy = (torch.randn(rows, cols, device="cuda") * 1e4).to(dtype)
        want = y.double() * (dy.double() - (y.double() * dy.double()).sum(-1, keepdim=True))
        for in_place in (False, True):  # dx into a poisoned tensor, then over dy itself
            d = dy.clone() if in_place else dy
            got = run(y, d, out=d if in_place else torch.full_like(y, float("nan")), **knobs).double()
            err = ((got - want).abs() / (want.abs() + 1)).max().item()
            if not err < (1e-5 if dtype == torch.float32 else 2e-2):
                bad.append(f"{rows}x{cols} {dtype} {knobs}: {err:.3g}")
    return bad


def main(path):
    bf16, f32 = torch.bfloat16, torch.float32
    grid = {bf16: [dict(parts=p, num_warps=w, dsmem=d) for p in (4, 8, 16) for w in (4, 8) for d in (False, True)],
            f32: [dict(parts=p, num_warps=w, dsmem=d) for p in (8, 16) for w in (4, 8) for d in (False, True)]}
    shapes = [(1024, 128256, bf16), (512, 151936, f32), (1024, 65536, f32), (1024, 65536, bf16)]
    bad = edge_check([(4, 128256, bf16, dict(parts=8, num_warps=4, dsmem=d)) for d in (False, True)]
                     + [(4, 151936, f32, dict(parts=16, num_warps=4, dsmem=d)) for d in (False, True)])
    print("edge check:", bad or "ok", flush=True)
    cases = []
    for n_rows, n_cols, dtype in shapes:
        cands = [("clustered_backward", lambda y, dy, out, k=k: clustered_backward(y, dy, out, **k), k)
                 for k in grid[dtype]]
        cases.append((n_rows, n_cols, dtype, cands))
    bench.sweep(path, cases, "PYTHONPATH=code python3 benchmarks/sweeps/clustered_backward.py OUT.json",
                kind="backward", edge_check=bad or "ok")


if __name__ == "__main__":
    main(sys.argv[1])
