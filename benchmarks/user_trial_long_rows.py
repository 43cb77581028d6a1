#!/usr/bin/env python3
"""A user's trial of softmax_lab.softmax on long rows (the Hopper clustered_tma range and its neighbours).

Run from the repository root on the GPU machine (one device call of about 400 s):
    PYTHONPATH=code python3 benchmarks/user_trial_long_rows.py 2>&1 | tee $OUT/trial.log
(a driver process; each case runs in a child process, which is restarted after a case that broke the CUDA
context or hung for TRIAL_CASE_TIMEOUT seconds, default 150: ``trial_harness.py``). One line per case: PASS /
FAIL / EXC / SKIP, then a summary. TRIAL_BUDGET (seconds, default 365): cases not started by then are SKIPped.
TRIAL_DRY=1 runs the script itself on the CPU against torch.softmax (TRIAL_DRY_SKIP: name prefixes to leave out).

Written in round 13 of issue 28 by a helper acting as a PyTorch user; round 14 added the streamed form's ranges
(2b.) and ran it (benchmarks/records/h200-user-trial-round14.log).
"""
import math
import os
import sys
import time

from trial_harness import drive, run_cases  # (beside this script: python3 puts its folder on the path)

BUDGET_S = float(os.environ.get("TRIAL_BUDGET", "365"))
CASE_TIMEOUT_S = float(os.environ.get("TRIAL_CASE_TIMEOUT", "150"))


# ------------------------------------------------------------------------------------------------ child
def child(start):
    import torch

    T0 = float(os.environ.get("TRIAL_T0", time.time()))
    import softmax_lab
    from softmax_lab import dispatch

    S = softmax_lab.softmax
    dev = "cuda"
    DRY = os.environ.get("TRIAL_DRY") == "1"  # a local dry run of the script itself: CPU, torch.softmax
    if DRY:
        dev = "cpu"
        S = lambda x, dim=-1, dtype=None: torch.softmax(x, dim, dtype=dtype)
    f32, f16, bf16, f64 = torch.float32, torch.float16, torch.bfloat16, torch.float64
    NAN, INF = float("nan"), float("inf")
    TOL = {f32: (1e-6, 1e-5), f16: (1e-3, 1.6e-2), bf16: (1e-3, 1.6e-2), f64: (1e-12, 1e-10)}
    # extra, stricter checks (atol 1e-3 alone hides a lot when every probability is ~1e-5)
    RELNORM = {f32: 1e-5, f16: 4e-3, bf16: 1e-2, f64: 1e-10}
    ROWSUM = {f32: 1e-4, f16: 1e-2, bf16: 1e-2, f64: 1e-9}
    GRAD_RELNORM = {f32: 1e-4, f16: 2e-2, bf16: 4e-2, f64: 1e-9}
    DN = {f32: "fp32", f16: "fp16", bf16: "bf16", f64: "fp64"}

    def sync():
        if not DRY:
            torch.cuda.synchronize()

    def rnd(shape, dtype, scale=3.0):
        if math.prod(shape) > (1 << 28):
            x = torch.empty(shape, dtype=dtype, device=dev)
            return x.normal_(0.0, scale)
        return (torch.randn(shape, device=dev, dtype=f32) * scale).to(dtype)

    def kern(x, dim=-1):
        try:
            d = dim % x.dim()
            if d != x.dim() - 1:
                return "rows-copy(dim)"
            if x.dim() == 2 and x.stride(1) == 1:
                return dispatch._runnable(x)[0]
            if x.is_contiguous():
                return dispatch._runnable(x.view(-1, x.shape[-1]))[0]
            return "rows-copy"
        except Exception as e:
            return f"?({type(e).__name__})"

    def judge(out, xref, dim=-1, out_dtype=None, names=None):
        """(ok, detail): out against torch.softmax(xref.double(), dim); xref already cast as torch would."""
        exp_dtype = out_dtype or xref.dtype
        msgs, ok = [], True
        if out.dtype != exp_dtype:
            ok = False
            msgs.append(f"DTYPE {out.dtype} != {exp_dtype}")
        if tuple(out.shape) != tuple(xref.shape):
            return False, f"SHAPE {tuple(out.shape)} != {tuple(xref.shape)}"
        atol, rtol = TOL.get(out.dtype, TOL[exp_dtype])
        d = dim % xref.dim()
        o2 = out.movedim(d, -1).reshape(-1, out.shape[d])
        x2 = xref.movedim(d, -1).reshape(-1, xref.shape[d])
        n_rows, n = x2.shape
        chunk = max(1, (1 << 26) // max(n, 1))
        maxerr, nbad, nanmis, first, bad_rows = 0.0, 0, 0, None, []
        tbad, tmax = 0, 0.0
        num, den, worst_sum = 0.0, 0.0, 0.0
        for r0 in range(0, n_rows, chunk):
            ref = torch.softmax(x2[r0:r0 + chunk].double(), -1)
            o = o2[r0:r0 + chunk].double()
            tt = torch.softmax(x2[r0:r0 + chunk], -1).double()  # torch's own result in x's dtype: a baseline
            tn = tt.isnan() | ref.isnan()
            terr = torch.where(tn, torch.zeros_like(ref), (tt - ref).abs())
            tbad += int(((tt.isnan() != ref.isnan()) | (terr > atol + rtol * ref.abs())).sum())
            tmax = max(tmax, float(terr.max()))
            del tt, tn, terr
            rn, on = ref.isnan(), o.isnan()
            mis = rn != on
            err = torch.where(rn | on, torch.zeros_like(ref), (o - ref).abs())
            bad = mis | (err > atol + rtol * ref.abs())
            maxerr = max(maxerr, float(err.max()))
            nb = int(bad.sum())
            nbad += nb
            nanmis += int(mis.sum())
            finite_rows = ~(rn.any(1) | on.any(1))
            if finite_rows.any():
                num += float(((o - ref)[finite_rows] ** 2).sum())
                den += float((ref[finite_rows] ** 2).sum())
                worst_sum = max(worst_sum, float((o[finite_rows].sum(1) - 1).abs().max()))
            if nb:
                rows = bad.any(1).nonzero().flatten()
                bad_rows += (rows + r0).tolist()
                if first is None:
                    r = int(rows[0])
                    c = int(bad[r].nonzero()[0])
                    first = f"row {r + r0} col {c}: got {float(o[r, c]):.6g} want {float(ref[r, c]):.6g}"
            del ref, o, rn, on, mis, err, bad
        relnorm = math.sqrt(num / den) if den > 0 else 0.0
        msgs.append(f"maxerr={maxerr:.3g} relnorm={relnorm:.2g} rowsum_err={worst_sum:.2g}")
        if nbad:
            ok = False
            br = bad_rows[:6]
            if names:
                br = [f"{r}:{names[r % len(names)]}" for r in br]
            msgs.append(f"BAD {nbad}/{o2.numel()} elems (nan mismatches {nanmis}), bad rows "
                        f"{len(bad_rows)}/{n_rows} e.g. {br}; first {first}")
        if nbad or tbad:
            msgs.append(f"(torch.softmax itself: {tbad} bad, maxerr={tmax:.3g})")
        if relnorm > RELNORM[out.dtype if out.dtype in RELNORM else exp_dtype]:
            ok = False
            msgs.append("STRICT: relnorm too big")
        if worst_sum > ROWSUM[out.dtype if out.dtype in ROWSUM else exp_dtype]:
            ok = False
            msgs.append("STRICT: row sum off")
        return ok, " ".join(msgs)

    def judge_tensor(got, want64, dtype, what):
        atol, rtol = TOL[dtype]
        g = got.double()
        gn, wn = g.isnan(), want64.isnan()
        err = torch.where(gn | wn, torch.zeros_like(want64), (g - want64).abs())
        bad = (gn != wn) | (err > atol + rtol * want64.abs())
        relnorm = float(((g - want64)[~(gn | wn)]).norm() / want64[~(gn | wn)].norm().clamp_min(1e-300))
        ok = not bool(bad.any()) and relnorm <= GRAD_RELNORM[dtype] and got.dtype == dtype
        s = f"{what}: maxerr={float(err.max()):.3g} relnorm={relnorm:.2g}"
        if bad.any():
            idx = bad.nonzero()[0].tolist()
            s += f" BAD {int(bad.sum())}/{bad.numel()} first at {idx}: got {float(g[tuple(idx)]):.6g} " \
                 f"want {float(want64[tuple(idx)]):.6g}"
        if relnorm > GRAD_RELNORM[dtype]:
            s += " STRICT: relnorm too big"
        if got.dtype != dtype:
            s += f" DTYPE {got.dtype}"
        return ok, s

    def timed(fn):
        sync()
        t = time.time()
        r = fn()
        sync()
        return r, time.time() - t

    def combine(*parts):
        return all(p[0] for p in parts), " | ".join(p[1] for p in parts)

    # -------------------------------------------------------------------------------------- case makers
    cases = []

    def add(name, fn):
        cases.append((name, fn))

    def plain(dtype, rows, n):
        def fn():
            x = rnd((rows, n), dtype)
            y, t1 = timed(lambda: S(x))
            y2, t2 = timed(lambda: S(x))
            ok, det = judge(y, x)
            same = bool(((y == y2) | (y.isnan() & y2.isnan())).all())
            if not same:
                ok, det = False, det + " NOT-DETERMINISTIC(2nd call differs)"
            return ok, f"{det} kernel={kern(x)} t1={t1 * 1e3:.0f}ms t2={t2 * 1e3:.2f}ms"
        add(f"plain {DN[dtype]} {rows}x{n}", fn)

    def special_rows(n, dtype, device=dev):
        big = 3e38 if dtype != f16 else 6e4
        huge = 1e10 if dtype != f16 else 1e4
        names, rows = [], []

        def a(name, v):
            names.append(name)
            rows.append(v)

        def base():
            return torch.randn(n, device=device) * 3

        def full(v):
            return torch.full((n,), v, device=device)
        a("all -inf", full(-INF))
        v = base()
        v[: n // 2] = -INF
        a("first half -inf", v)
        v = base()
        v[n // 2:] = -INF
        a("second half -inf", v)
        v = base()
        v[-(n // 9):] = -INF
        a("last ninth -inf", v)
        v = base()
        v[n - 1] = INF
        a("+inf at last", v)
        v = base()
        v[0] = INF
        a("+inf at first", v)
        v = base()
        v[n // 2 + 7] = NAN
        a("NaN mid", v)
        v = base()
        v[n - 1] = NAN
        a("NaN last", v)
        a("uniform +-big", (torch.rand(n, device=device) * 2 - 1) * big)
        a("all +big", full(big))
        a("all -big", full(-big))
        v = full(-big)
        v[n // 3] = big
        a("-big with one +big", v)
        a("~1e10*randn", torch.randn(n, device=device) * huge)
        a("all equal 0", full(0.0))
        a("all equal 7.5", full(7.5))
        a("very negative -1e4-rand", -1e4 - torch.rand(n, device=device))
        v = full(-INF)
        v[n - 1] = 0.0
        a("one-hot last (rest -inf)", v)
        v = full(-INF)
        v[0] = 5.0
        a("one-hot first (rest -inf)", v)
        v = base()
        v[torch.rand(n, device=device) < 0.9] = -INF
        a("90% -inf", v)
        v = base()
        v[0] = INF
        v[1] = -INF
        a("+inf and -inf", v)
        v = base()
        v[n // 2] = 100.0
        a("spike 100", v)
        v = base()
        v[n - 1] = 80.0
        a("spike 80 at last", v)
        return torch.stack(rows).to(dtype), names

    def special(dtype, n):
        def fn():
            x, names = special_rows(n, dtype)
            y = S(x)
            ok, det = judge(y, x, names=names)
            return ok, f"{det} kernel={kern(x)}"
        add(f"special-rows {DN[dtype]} {len(special_rows(64, f32, 'cpu')[1])}x{n}", fn)

    def special_single(dtype, n):
        def fn():
            x, names = special_rows(n, dtype)
            res = []
            for i, nm in enumerate(names):
                ok, det = judge(S(x[i:i + 1].clone()), x[i:i + 1])
                if not ok:
                    res.append(f"[{nm}] {det}")
            return (not res), ("all single rows ok" if not res else " ;; ".join(res))
        add(f"special-rows one at a time (1x{n}) {DN[dtype]}", fn)

    def viewcase(name, make, dim=-1):
        def fn():
            x = make()
            y = S(x, dim)
            ok, det = judge(y, x, dim)
            return ok, f"{det} kernel={kern(x, dim)} shape={tuple(x.shape)} stride={x.stride()} " \
                       f"ptr%16={x.data_ptr() % 16}"
        add(name, fn)

    def dtype_case(in_dtype, shape, out_dtype):
        def fn():
            x = rnd(shape, in_dtype)
            y = S(x, -1, dtype=out_dtype)
            ok, det = judge(y, x.to(out_dtype), -1, out_dtype=out_dtype)
            yt = torch.softmax(x, -1, dtype=out_dtype)
            if yt.dtype != y.dtype:
                ok, det = False, det + f" torch gives {yt.dtype}"
            return ok, det
        add(f"dtype= {DN[in_dtype]}->{DN[out_dtype]} {shape}", fn)

    def grad_case(dtype, shape, dim=-1, make=None):
        def fn():
            x0 = make() if make else rnd(shape, dtype)
            x = x0.detach().clone().requires_grad_()
            g = rnd(tuple(x0.shape), dtype, 1.0)
            y = S(x, dim)
            (y * g).sum().backward()
            xd = x0.detach().double().requires_grad_()
            yd = torch.softmax(xd, dim)
            (yd * g.double()).sum().backward()
            return combine(judge(y.detach(), x0, dim), judge_tensor(x.grad, xd.grad, dtype, "grad"))
        add(f"autograd {DN[dtype]} {shape} dim={dim}" + (" (view)" if make else ""), fn)

    def repeat_case(name, make, calls=3):
        def fn():
            res = []
            for k in range(calls):
                x = make()
                y = S(x)
                ok, det = judge(y, x)
                res.append((ok, f"call{k + 1}: {det}"))
            return combine(*res)
        add(f"repeat x{calls} fresh {name}", fn)

    def graph_case(dtype, shape, warm=True, make=None):
        def fn():
            x = make() if make else rnd(shape, dtype)
            if warm:
                s = torch.cuda.Stream()
                s.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(s):
                    for _ in range(2):
                        S(x)
                torch.cuda.current_stream().wait_stream(s)
            sync()
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                y = S(x)
            sync()
            res = []
            for k in range(3):
                with torch.no_grad():
                    x.copy_(rnd(tuple(x.shape), x.dtype))
                y.fill_(NAN)
                g.replay()
                sync()
                ok, det = judge(y, x)
                res.append((ok, f"replay{k + 1}: {det}"))
            return combine(*res)
        add(f"cuda-graph {'warm' if warm else 'NO-warmup'} {DN[dtype]} {shape}" + (" view" if make else ""), fn)

    def compile_case(dtype, shapes, dim=-1):
        def fn():
            import torch._dynamo
            torch._dynamo.reset()

            def f(x):
                return softmax_lab.softmax(x * 0.5, dim=dim) + 0.0
            cf = torch.compile(f, fullgraph=False)
            res = []
            for k, shape in enumerate(shapes):
                x = rnd(shape, dtype)
                y, t = timed(lambda: cf(x))
                ok, det = judge(y, x * 0.5, dim)
                res.append((ok, f"call{k + 1} {shape} ({t:.1f}s): {det}"))
            return combine(*res)
        add(f"torch.compile {DN[dtype]} {shapes} dim={dim}", fn)

    def compile_grad_case(dtype, shape):
        def fn():
            import torch._dynamo
            torch._dynamo.reset()
            w = rnd(shape, dtype, 1.0)

            def f(x):
                return (softmax_lab.softmax(x, dim=-1) * w).sum()
            cf = torch.compile(f, fullgraph=False)
            x0 = rnd(shape, dtype)
            x = x0.clone().requires_grad_()
            (_, t) = timed(lambda: cf(x).backward())
            xd = x0.double().requires_grad_()
            (torch.softmax(xd, -1) * w.double()).sum().backward()
            ok, det = judge_tensor(x.grad, xd.grad, dtype, f"compiled grad ({t:.1f}s)")
            return ok, det
        add(f"torch.compile+backward {DN[dtype]} {shape}", fn)

    def out_case(dtype, rows, n, kind):
        def fn():
            from softmax_lab.kernels.clustered_tma import clustered_tma_softmax
            x = rnd((rows, n), dtype)
            if kind == "poisoned out":
                out = torch.full_like(x, NAN)
                r = clustered_tma_softmax(x, out=out)
                ok, det = judge(out, x)
                if r.data_ptr() != out.data_ptr():
                    ok, det = False, det + " returned tensor is not out"
                return ok, det
            if kind == "in place (out=x)":
                x0 = x.clone()
                clustered_tma_softmax(x, out=x)
                return judge(x, x0)
            pad = 64 if kind == "out view, padded stride" else 3
            buf = torch.full((rows, n + pad), NAN, dtype=dtype, device=dev)
            out = buf[:, :n]
            clustered_tma_softmax(x, out=out)
            ok, det = judge(out, x)
            if not bool(buf[:, n:].isnan().all()):
                ok, det = False, det + " WROTE PAST THE ROW into the padding"
            return ok, det
        add(f"out= clustered_tma_softmax {DN[dtype]} {rows}x{n} {kind}", fn)

    def huge_case(dtype, rows, n, check):
        def fn():
            x = rnd((rows, n), dtype)
            y, t = timed(lambda x=x: S(x))
            res = []
            for r in check:
                ok, det = judge(y[r:r + 1], x[r:r + 1])
                res.append((ok, f"row {r}: {det}"))
            k = kern(x)
            del x, y
            torch.cuda.empty_cache()
            ok, det = combine(*res)
            return ok, f"numel={rows * n} (>2**31: {rows * n > 2 ** 31}) kernel={k} t={t * 1e3:.0f}ms {det}"
        add(f"huge {DN[dtype]} {rows}x{n}", fn)

    def stress_case(dtype, rows, n, reps):
        def fn():
            res = []
            for k in range(reps):
                x = rnd((rows, n), dtype)
                y, t = timed(lambda x=x: S(x))
                ok, det = judge(y, x)
                res.append((ok, f"rep{k + 1} ({t * 1e3:.1f}ms): {det}"))
                del x, y
            torch.cuda.empty_cache()
            return combine(*res)
        add(f"stress {DN[dtype]} {rows}x{n} x{reps}", fn)

    # -------------------------------------------------------------------------------------- the cases
    # 1. plain 2-D, in range
    for n in (49152, 65536, 100000, 131072, 163840):
        for rows in (1, 2, 3, 1000):
            plain(f32, rows, n)
    for n in (57352, 65536, 81920):
        for rows in (1, 2, 3, 1000):
            plain(bf16, rows, n)
    for n in (65536, 81920):
        for rows in (1, 3, 1000):
            plain(f16, rows, n)
    # 2. neighbours / odd lengths
    for n in (49151, 49153, 49156, 65540, 128256, 131076, 151936, 163841, 163844):
        for rows in (1, 3):
            plain(f32, rows, n)
    for n in (57344, 57345, 65537, 70000, 81921, 81928, 128256):
        for rows in (1, 3):
            plain(bf16, rows, n)
    plain(f16, 3, 57345)
    plain(f16, 3, 57352)
    plain(f32, 1000, 151936)
    plain(f32, 1000, 65540)
    plain(bf16, 1000, 70000)
    # 2b. (round 14) the streamed form's ranges: 16-bit rows to 262,144, fp32 rows to 262,144, and past them
    for n, dtype in ((73728, bf16), (73736, bf16), (163840, bf16), (196616, f16), (262144, bf16), (262152, bf16),
                     (200000, f32), (262144, f32), (262148, f32)):
        for rows in (1, 3):
            plain(dtype, rows, n)
    plain(bf16, 1000, 128256)
    plain(f32, 500, 200000)
    # 3. repeated calls with fresh tensors (the plan cache)
    repeat_case("fp32 3x65536", lambda: rnd((3, 65536), f32))
    repeat_case("fp32 1000x131072", lambda: rnd((1000, 131072), f32))
    repeat_case("fp32 2x163840", lambda: rnd((2, 163840), f32))
    repeat_case("bf16 3x81920", lambda: rnd((3, 81920), bf16))
    repeat_case("fp16 2x57352", lambda: rnd((2, 57352), f16))
    repeat_case("fp32 2x163844 (cooperative)", lambda: rnd((2, 163844), f32))
    repeat_case("fp32 x[1:] of 4x100000", lambda: rnd((4, 100000), f32)[1:])
    repeat_case("fp32 x[:, :65536] of 3x65600", lambda: rnd((3, 65600), f32)[:, :65536])
    repeat_case("bf16 x[:, 1:] of 3x81921", lambda: rnd((3, 81921), bf16)[:, 1:])
    repeat_case("fp32 1x65536 then same shape (alternating rows alloc)", lambda: rnd((1, 65536), f32), calls=4)

    def inplace_repeat():
        x = rnd((3, 65536), f32)
        res = []
        for _ in range(3):
            y = S(x)
            res.append(judge(y, x))
            x.copy_(rnd((3, 65536), f32))
        return combine(*res)
    add("repeat same tensor, changed in place, fp32 3x65536", inplace_repeat)
    # 4. special rows
    for n in (49152, 65536, 100000, 131072, 163840, 65540):
        special(f32, n)
    for n in (57352, 65536, 81920):
        special(bf16, n)
    special(f16, 65536)
    special(f32, 163844)
    special(bf16, 81921)
    special_single(f32, 65536)
    special_single(bf16, 81920)
    # 5. views
    viewcase("view fp32 x[:, :65536] of 3x65600 (stride mult of 16B)", lambda: rnd((3, 65600), f32)[:, :65536])
    viewcase("view fp32 x[:, :65536] of 3x65539 (stride not mult of 16B)", lambda: rnd((3, 65539), f32)[:, :65536])
    viewcase("view fp32 x[:, :100000] of 1000x100004", lambda: rnd((1000, 100004), f32)[:, :100000])
    viewcase("view fp32 x[:, :163840] of 3x163848", lambda: rnd((3, 163848), f32)[:, :163840])
    viewcase("view bf16 x[:, :65536] of 3x65544", lambda: rnd((3, 65544), bf16)[:, :65536])
    viewcase("view bf16 x[:, :81920] of 3x81925 (stride not mult)", lambda: rnd((3, 81925), bf16)[:, :81920])
    viewcase("view fp32 x[1:] of 4x65536", lambda: rnd((4, 65536), f32)[1:])
    viewcase("view fp32 x[1:] of 4x100000", lambda: rnd((4, 100000), f32)[1:])
    viewcase("view fp32 x[1:] of 4x65540", lambda: rnd((4, 65540), f32)[1:])
    viewcase("view bf16 x[1:] of 4x81920", lambda: rnd((4, 81920), bf16)[1:])
    viewcase("view bf16 x[1:] of 4x70000", lambda: rnd((4, 70000), bf16)[1:])
    viewcase("view fp32 x[:, 1:] of 3x65537", lambda: rnd((3, 65537), f32)[:, 1:])
    viewcase("view fp32 x[:, 1:] of 3x163841", lambda: rnd((3, 163841), f32)[:, 1:])
    viewcase("view bf16 x[:, 1:] of 3x81921", lambda: rnd((3, 81921), bf16)[:, 1:])
    viewcase("view fp16 x[:, 1:] of 3x65537", lambda: rnd((3, 65537), f16)[:, 1:])
    viewcase("view fp32 flat[2:] as 3x65536 (8B offset)",
             lambda: rnd((3 * 65536 + 8,), f32)[2:2 + 3 * 65536].view(3, 65536))
    viewcase("view fp32 x.t() of 65536x5", lambda: rnd((65536, 5), f32).t())
    viewcase("view bf16 x.t() of 81920x3", lambda: rnd((81920, 3), bf16).t())
    viewcase("view fp32 expand 1x65536 -> 4x65536 (stride 0)", lambda: rnd((1, 65536), f32).expand(4, 65536))
    viewcase("view fp32 expand 1x131072 -> 2x131072", lambda: rnd((1, 131072), f32).expand(2, 131072))
    viewcase("view bf16 expand 1x81920 -> 3x81920", lambda: rnd((1, 81920), bf16).expand(3, 81920))
    viewcase("view fp32 x[:1, :65536] of 2x70000 (1 row, wide stride)", lambda: rnd((2, 70000), f32)[:1, :65536])
    viewcase("view fp32 x[1:2, :65536] of 2x70001 (1 row, 4B offset)", lambda: rnd((2, 70001), f32)[1:2, :65536])
    viewcase("view fp32 x[::2] of 6x65536 (every other row)", lambda: rnd((6, 65536), f32)[::2])
    # 6. N-D, other dims
    viewcase("3-D fp32 4x8x65536 dim=-1", lambda: rnd((4, 8, 65536), f32))
    viewcase("4-D bf16 2x3x2x81920 dim=-1", lambda: rnd((2, 3, 2, 81920), bf16))
    viewcase("4-D fp32 2x2x2x163840 dim=3", lambda: rnd((2, 2, 2, 163840), f32), dim=3)
    viewcase("2-D fp32 65536x3 dim=0", lambda: rnd((65536, 3), f32), dim=0)
    viewcase("3-D fp32 3x131072x2 dim=1", lambda: rnd((3, 131072, 2), f32), dim=1)
    viewcase("3-D bf16 2x81920x3 dim=1", lambda: rnd((2, 81920, 3), bf16), dim=1)
    viewcase("4-D fp32 2x100000x2x2 dim=1", lambda: rnd((2, 100000, 2, 2), f32), dim=1)
    viewcase("3-D fp32 163840x2x2 dim=0", lambda: rnd((163840, 2, 2), f32), dim=0)
    viewcase("3-D fp32 permute(1,2,0) of 65536x4x3 dim=-1", lambda: rnd((65536, 4, 3), f32).permute(1, 2, 0))
    viewcase("3-D fp32 transpose(0,1) of 5x3x65536 dim=-1", lambda: rnd((5, 3, 65536), f32).transpose(0, 1))
    viewcase("3-D bf16 permute(2,0,1) of 2x3x81920 dim=0", lambda: rnd((2, 3, 81920), bf16).permute(2, 0, 1), dim=0)
    viewcase("1-D fp32 65536", lambda: rnd((65536,), f32))
    viewcase("1-D bf16 81920", lambda: rnd((81920,), bf16))
    # 7. dtype=
    dtype_case(bf16, (3, 65536), f32)
    dtype_case(bf16, (2, 131072), f32)
    dtype_case(f16, (3, 81920), f32)
    dtype_case(f32, (3, 65536), bf16)
    dtype_case(f32, (2, 65536), f64)
    # 8. autograd
    for n in (49152, 65536, 100000, 128256, 151936, 163840):
        grad_case(f32, (3, n))
    grad_case(f32, (1000, 65536))
    grad_case(f32, (2, 163844))
    grad_case(bf16, (3, 65536))
    grad_case(bf16, (3, 81920))
    grad_case(f16, (3, 57352))
    grad_case(f32, (65536, 3), dim=0)
    grad_case(f32, (3, 65536), make=lambda: rnd((3, 65600), f32)[:, :65536])

    # 11. CUDA graphs
    graph_case(f32, (4, 65536))
    graph_case(f32, (2, 163840))
    graph_case(f32, (3, 131072))
    graph_case(bf16, (3, 81920))
    graph_case(f32, (2, 163844))
    graph_case(bf16, (3, 81921))
    graph_case(f32, (5, 65536), warm=False)
    graph_case(f32, (3, 100000), make=lambda: rnd((4, 100000), f32)[1:])
    # 12. huge (> 2**31 elements)
    huge_case(bf16, 32769, 65536, (0, 1, 16383, 16384, 32767, 32768))
    huge_case(f32, 16385, 131072, (0, 8191, 16383, 16384))
    huge_case(f32, 13108, 163840, (0, 13106, 13107))
    # 13. torch.compile
    compile_case(f32, [(3, 65536), (3, 65536), (5, 65536)])
    compile_case(bf16, [(2, 81920), (2, 81920)])
    compile_case(f32, [(65536, 3)], dim=0)
    compile_grad_case(f32, (2, 65536))
    # 9. no_grad / inference_mode / streams
    def no_grad_case(dtype, shape, mode):
        def fn():
            x = rnd(shape, dtype).requires_grad_()
            ctx = torch.no_grad() if mode == "no_grad" else torch.inference_mode()
            with ctx:
                y = S(x)
            return judge(y, x.detach())
        add(f"{mode} {DN[dtype]} {shape} (x.requires_grad)", fn)
    no_grad_case(f32, (3, 65536), "no_grad")
    no_grad_case(bf16, (3, 81920), "no_grad")
    no_grad_case(f32, (2, 163840), "inference_mode")

    def streams_case(dtype, shape):
        def fn():
            s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
            xa, xb = rnd(shape, dtype), rnd(shape, dtype)
            sync()
            with torch.cuda.stream(s1):
                ya = S(xa)
            with torch.cuda.stream(s2):
                yb = S(xb)
            sync()
            return combine(judge(ya, xa), judge(yb, xb))
        add(f"two side streams at once {DN[dtype]} {shape}", fn)
    streams_case(f32, (64, 65536))
    streams_case(f32, (64, 163844))
    streams_case(bf16, (64, 81921))
    # 10. out= on the kernel itself
    for kind in ("poisoned out", "in place (out=x)", "out view, padded stride", "out view, odd stride"):
        out_case(f32, 3, 65536, kind)
    out_case(bf16, 3, 81920, "poisoned out")
    out_case(bf16, 3, 81920, "out view, odd stride")
    out_case(f32, 3, 131072, "out view, padded stride")
    # 14. stress (races between the programs of a cluster?)
    stress_case(f32, 8192, 65536, 3)
    stress_case(bf16, 8192, 81920, 3)
    stress_case(f32, 4096, 163840, 2)
    stress_case(f32, 8192, 131072, 2)
    stress_case(f16, 8192, 57352, 2)
    stress_case(f32, 16384, 49152, 2)

    # -------------------------------------------------------------------------------------- run
    print(f"@@TOTAL {len(cases)}", flush=True)
    if start == 0:
        import triton
        gpu = "DRY-CPU" if DRY else f"{torch.cuda.get_device_name()} cap {torch.cuda.get_device_capability()}"
        print(f"== torch {torch.__version__} triton {triton.__version__} GPU {gpu} cases {len(cases)}", flush=True)
    dry_skip = [p for p in os.environ.get("TRIAL_DRY_SKIP", "").split(",") if p]
    run_cases(cases, start, T0, BUDGET_S, not DRY,
              lambda i, case: "" if DRY and any(case[0].startswith(p) for p in dry_skip) else None)


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        child(int(sys.argv[2]))
    else:
        sys.exit(drive(__file__, [], BUDGET_S, CASE_TIMEOUT_S))
