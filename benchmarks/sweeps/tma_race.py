"""Round 13: how often a clustered_tma form gives a wrong row, every row of fresh inputs checked against float64.
GPU machine, repository root:

    PYTHONPATH=code python3 benchmarks/sweeps/tma_race.py            # the held form, the dispatcher's settings
    PYTHONPATH=code python3 benchmarks/sweeps/tma_race.py --stream   # the streamed form (sweeps/clustered_tma.py)
    PYTHONPATH=code python3 benchmarks/sweeps/tma_race.py --library  # round 14: both forms of the library's kernel
    PYTHONPATH=code python3 benchmarks/sweeps/tma_race.py --diagnose     # round 14: what the wrong rows look like
    PYTHONPATH=code python3 benchmarks/sweeps/tma_race.py --invalidated  # round 14: the fix, against without it

``--stream`` is the second of round 13's two probes (h200-tma-race-2-round13.log: 53-124 wrong rows in 20 × 1024,
with or without a whole-cluster barrier after the exchange or before the programs leave); the first
(h200-tma-race-1-round13.log) ran the library's held form at 1024×65536 bf16 (0 of 20,480 rows wrong), its streamed
form (55 and 98) and the sweep's (78, and 0 for its held form). The held probe over every setting below ran in
round 14 (h200-tma-race-held-round14.log: 0 wrong rows at each). Round 14 found the cause (``--diagnose``,
h200-tma-diagnose-round14.log): only program 0's (max, sum) was ever wrong, and only the reductions' scratch of
program 0 lies on the TMA copies' mbarrier, which was never invalidated (PTX asks for ``mbarrier.inval`` before an
mbarrier's bytes serve anything else): with it (the sweep's FIX 6), 0 wrong rows of 40 × 1024 at four settings,
without it 104-780 (``--invalidated``, h200-tma-invalidated-round14.log). compute-sanitizer's racecheck, synccheck
and memcheck saw nothing (h200-tma-sanitizer-round14.log): the barrier's write comes from the hardware.
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


def bad_rows_per_input(launch, n_rows, n, dtype, inputs):
    """Wrong rows in each of ``inputs`` fresh inputs (3·randn, NaN-poisoned outputs), ``launch(x, y)`` writing y."""
    counts = []
    for _ in range(inputs):
        x = (3 * torch.randn(n_rows, n, device="cuda")).to(dtype)
        y = torch.full_like(x, float("nan"))
        launch(x, y)
        counts.append(bad_rows(y, x))
    return counts


# (rows, columns, dtype, parts, warps, streamed): round 13's held settings, then (round 14) the streamed ones.
SETTINGS = [(1024, 65536, BF16, 8, 4, False), (1024, 60000, F16, 8, 4, False), (1024, 81920, BF16, 8, 4, False),
            (1024, 65536, F32, 8, 8, False), (1024, 50000, F32, 8, 8, False), (512, 100000, F32, 16, 4, False),
            (512, 128256, F32, 16, 4, False), (256, 151936, F32, 8, 8, False), (256, 163840, F32, 8, 8, False)]
STREAMED = [(1024, 60000, BF16, 4, 4, True), (1024, 65536, F16, 4, 4, True), (1024, 80000, BF16, 8, 4, True),
            (1024, 128256, BF16, 8, 4, True), (1024, 131072, F16, 8, 4, True), (512, 140000, F32, 16, 4, True),
            (512, 163840, F32, 16, 4, True)]


def held_probe(settings=SETTINGS, inputs=50):
    """The library's kernel (``clustered_tma_softmax``) at each setting, every row of ``inputs`` fresh inputs."""
    for n_rows, n, dtype, parts, warps, stream in settings:
        counts = bad_rows_per_input(lambda x, y: clustered_tma_softmax(x, out=y, parts=parts, num_warps=warps,
                                                                        stream=stream), n_rows, n, dtype, inputs)
        print(f"{n_rows}x{n} {str(dtype)[6:]:9s} {parts}x{warps} {'streamed' if stream else 'held'}: bad rows in "
              f"{inputs} inputs: {sum(counts)}", flush=True)


def stream_probe():
    import triton

    sweep = _sweep()

    def form(parts, fix):
        return lambda x, y: sweep.tma_softmax(x, y, parts, 4, "stream", fix=fix)

    forms = {"sweep stream 4x4 65536": (65536, form(4, 0)),
             "... + cluster barrier after exchange": (65536, form(4, 1)),
             "... + cluster barrier at the end": (65536, form(4, 2)),
             "stream 8x4 128256 + barrier at end": (128256, form(8, 2)),
             "stream 8x4 128256 + after exchange": (128256, form(8, 1))}
    for name, (n, f) in forms.items():
        counts = bad_rows_per_input(f, 1024, n, BF16, 20)
        print(f"{name:36s} bad rows in 20 x 1024: {sum(counts)} {counts}", flush=True)
    for name, (n, f) in forms.items():  # rough timing (one 1024-row input, 128-256 MB, past the L2)
        x = (3 * torch.randn(1024, n, device="cuda")).bfloat16()
        y = torch.empty_like(x)
        copy = triton.testing.do_bench(lambda: y.copy_(x), rep=200)
        ms = triton.testing.do_bench(lambda: f(x, y), rep=200)
        print(f"{name:36s} {100 * copy / ms:5.1f}% of copy (rough)", flush=True)


def _sweep():
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import clustered_tma as sweep

    return sweep


def describe(sweep, x, y, dbg, copy, r, parts):
    """What is wrong in row ``r``: per program, its (m, l) against float64's over its slice, the (M, scale) it got
    from the exchange, how many elements of its slice the store pass read differently from x, how many outputs are
    wrong, and their spread of y / float64."""
    n = x.shape[1]
    slice_ = sweep.plan(n, parts, 4)["SLICE"]
    xs = x[r].double()
    ref = torch.softmax(xs, -1)
    m_ref = [xs[p * slice_:(p + 1) * slice_].max().item() for p in range(parts)]
    l_ref = [torch.exp(xs[p * slice_:(p + 1) * slice_] - m_ref[p]).sum().item() for p in range(parts)]
    big_m = max(m_ref)
    big_l = sum(l * torch.tensor(m - big_m).exp().item() for m, l in zip(m_ref, l_ref))
    lines = []
    for p in range(parts):
        cols = slice(p * slice_, min((p + 1) * slice_, n))
        m, l, got_m, scale = dbg[r, p].tolist()
        scale_ref = torch.tensor(m_ref[p] - big_m).exp().item() / big_l
        reread = int((copy[r, cols] != x[r, cols]).sum())
        bad = ~torch.isclose(y[r, cols].double(), ref[cols], atol=1e-3, rtol=2e-2, equal_nan=True)
        where = bad.nonzero().flatten()
        ratio = (y[r, cols].double() / ref[cols])[bad]
        lines.append(f"  p{p}: m {m:.4g} ({m_ref[p]:.4g}) l {l:.5g} ({l_ref[p]:.5g}) M {got_m:.4g} ({big_m:.4g}) "
                     f"scale {scale:.4g} ({scale_ref:.4g}) reread-diff {reread} wrong {int(bad.sum())}"
                     + (f" at {where[:6].tolist()} y/ref {ratio.min().item():.3g}..{ratio.max().item():.3g}"
                        if len(where) else ""))
    return "\n".join(lines)


def diagnose():
    """Round 14: the streamed form's wrong rows, looked at closely (``stream_kernel``'s DEBUG), and the race probes
    (its FIX 3-5) counted, at 1024×65536 bf16 over 4 programs of 4 warps."""
    sweep = _sweep()
    n, parts = 65536, 4
    for fix in (0, 3, 4, 5):
        counts = bad_rows_per_input(lambda x, y: sweep.tma_softmax(x, y, parts, 4, "stream", fix=fix), 1024, n, BF16,
                                    20)
        print(f"stream 4x4 65536 FIX {fix}: bad rows in 20 x 1024: {sum(counts)} {counts}", flush=True)
    shown = 0
    for i in range(40):
        x = (3 * torch.randn(1024, n, device="cuda")).bfloat16()
        y = torch.full_like(x, float("nan"))
        dbg = torch.full((1024, parts, 4), float("nan"), device="cuda")
        copy = torch.full_like(x, float("nan"))
        sweep.tma_softmax(x, y, parts, 4, "stream", debug=(dbg, copy))
        ref = torch.softmax(x.double(), -1)
        rows = (~torch.isclose(y.double(), ref, atol=1e-3, rtol=2e-2, equal_nan=True).all(dim=1)).nonzero()
        rows = rows.flatten().tolist()
        print(f"DEBUG input {i}: bad rows {rows}", flush=True)
        for r in rows[:3]:
            if shown < 12:
                print(f" row {r}:\n{describe(sweep, x, y, dbg, copy, r, parts)}", flush=True)
                shown += 1


def invalidated():
    """Round 14: the streamed form with its copies' mbarrier invalidated once waited on (FIX 6) against without
    (FIX 0), 40 fresh inputs each, at the widths the dispatcher would give it."""
    sweep = _sweep()
    for rows, n, dtype, parts, warps in ((1024, 65536, BF16, 4, 4), (1024, 128256, BF16, 8, 4),
                                         (1024, 100000, F16, 8, 4), (512, 151936, F32, 16, 4)):
        for fix in (0, 6):
            counts = bad_rows_per_input(lambda x, y: sweep.tma_softmax(x, y, parts, warps, "stream", fix=fix), rows,
                                        n, dtype, 40)
            print(f"stream {rows}x{n} {str(dtype)[6:]:9s} {parts}x{warps} FIX {fix}: bad rows in 40 inputs: "
                  f"{sum(counts)}", flush=True)


def once(form):
    """One launch (for compute-sanitizer): 256 rows of 65536 bf16, 4 programs of 4 warps, the streamed form or the
    held one (``--once stream|held``); prints the wrong rows."""
    sweep = _sweep()
    x = (3 * torch.randn(256, 65536, device="cuda")).bfloat16()
    y = torch.full_like(x, float("nan"))
    sweep.tma_softmax(x, y, 4, 4, "stream" if form == "stream" else "full")
    torch.cuda.synchronize()
    print(f"{form}: bad rows {bad_rows(y, x)} of 256", flush=True)


if __name__ == "__main__":
    if "--stream" in sys.argv:
        stream_probe()
    elif "--diagnose" in sys.argv:
        diagnose()
    elif "--invalidated" in sys.argv:
        invalidated()
    elif "--once" in sys.argv:
        once(sys.argv[sys.argv.index("--once") + 1])
    elif "--library" in sys.argv:  # (round 14: both forms, as the library has them)
        held_probe(SETTINGS + STREAMED, 30)
    else:
        held_probe()
