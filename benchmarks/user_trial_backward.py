#!/usr/bin/env python3
"""A user's trial of the *backward* of softmax_lab.softmax (autograd, softmax_lab.op.softmax_backward,
torch.compile, CUDA graphs), aimed at the Hopper kernel for rows of whole 16-byte vectors that start on 16 bytes
(16-bit rows of 16,384-262,144 elements, fp32 rows of 16,385-163,840, so in whole 4-element vectors
16,388-163,840) and at its neighbours (16,376, 16,392, 262,152; fp32 16,384, 16,385, 163,844; odd widths, views
one element in, odd strides, transposed dims).

Run from the repository root on the GPU machine (one NVIDIA H200, about 300 s or less):
    PYTHONPATH=code python3 benchmarks/user_trial_backward.py 2>&1 | tee $OUT/trial-backward.log

A driver process; each case runs in a child process, which is restarted after a case that broke the CUDA context
(or hung for TRIAL_CASE_TIMEOUT seconds, default 150). One line per case, PASS / FAIL / EXC / SKIP, then a summary.
Every result is compared with float64 torch (gradients by torch.autograd on float64 inputs, or, for direct
softmax_backward calls, dx = y·(dy − Σ y·dy) on the float64 values of the given y and dy); the same computation in
the input's dtype by torch itself is shown beside it (see "How a case is judged").

Environment:  TRIAL_BUDGET   seconds for the whole run (default 300); cases not started by then are SKIPped
              TRIAL_CASE_TIMEOUT  seconds one case may run before the driver kills its child (default 150)
Options:      --list         print the cases (index, name, tags) and exit; needs no GPU
              --only REGEX   run only the cases whose name matches REGEX (re.search)
              --cpu          run on the CPU (Triton's interpreter: slow; GPU-only cases are SKIPped) - a dry run
              --fake         replace softmax_lab by torch's own softmax and backward (checks this script itself)

How a case is judged (each part of a case prints maxerr and relnorm = ||got - ref|| / ||ref||, torch's own beside):
  * elementwise: |got - ref| <= atol + rtol |ref| with softmax_lab.testing.tolerance(dtype), x10 for gradients;
    NaN/inf where the float64 reference has them (or where torch itself, in the same dtype, has them);
  * relnorm <= 2e-5 (fp32), 3e-3 (fp16), 2e-2 (bf16) for gradients, or 4x torch's own relnorm when larger
    (the floor of ||ref|| is 5% of ||y * dy||, for gradients that nearly cancel, like that of y.sum());
  * for backward results: a per-element rounding bound, 8 eps |y| (|dy| + |s| + sum|y dy|) for 16-bit
    (1024 eps for fp32; plus fp16's subnormal steps), since the x10 tolerances pass anything for gradients of
    ~1e-5; elements beyond a bound but within 2x torch's own error there are excused (and counted).
  Outputs are fresh tensors, so instead of NaN-filled out= the caching allocator is left NaN-filled blocks of the
  result's size just before each call (and CUDA-graph outputs and .grad are NaN-filled before each replay).

A dry run on the CPU (--cpu) passes every case it runs except the bf16 y.sum() and y.mean() gradients: Triton's
interpreter truncates float32 to bfloat16 (docs/operator.md), so the rows of y sum to 1 - 2e-3 and those
gradients, which are exactly zero, come out 2e-3 y instead of ~1e-5 y.

Written by a helper acting as a PyTorch user; it could not be run on a GPU where it was written (a CPU dry run with
--cpu and a --fake run of the harness passed).
"""
import math
import os
import re
import sys
import time

from trial_harness import drive, run_cases  # (beside this script: python3 puts its folder on the path)

BUDGET_S = float(os.environ.get("TRIAL_BUDGET", "300"))
CASE_TIMEOUT_S = float(os.environ.get("TRIAL_CASE_TIMEOUT", "150"))


def parse_args(argv):
    opts = {"list": False, "only": None, "cpu": False, "fake": False, "child": None}
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--list":
            opts["list"] = True
        elif a == "--cpu":
            opts["cpu"] = True
        elif a == "--fake":
            opts["fake"] = True
        elif a == "--only":
            i += 1
            opts["only"] = argv[i]
        elif a == "--child":
            i += 1
            opts["child"] = int(argv[i])
        elif a in ("-h", "--help"):
            print(__doc__)
            sys.exit(0)
        else:
            sys.exit(f"unknown argument {a!r} (try --help)")
        i += 1
    return opts


def passthrough(opts):
    out = []
    if opts["cpu"]:
        out.append("--cpu")
    if opts["fake"]:
        out.append("--fake")
    if opts["only"] is not None:
        out += ["--only", opts["only"]]
    return out


# ------------------------------------------------------------------------------------------------ driver
def driver(opts):
    return drive(__file__, passthrough(opts), BUDGET_S, CASE_TIMEOUT_S, opts["only"])


# ------------------------------------------------------------------------------------------------ the cases
def build(opts):
    """(cases, ctx): cases is a list of (name, fn, tags); nothing here touches a GPU (``--list`` runs it anywhere)."""
    import torch

    f32, f16, bf16, f64 = torch.float32, torch.float16, torch.bfloat16, torch.float64
    NAN, INF = float("nan"), float("inf")
    DN = {f32: "fp32", f16: "fp16", bf16: "bf16", f64: "fp64"}
    ctx = {"dev": "cuda", "S": None, "B": None, "gpu": True}

    def dev():
        return ctx["dev"]

    def S(x, dim=-1, dtype=None, mask=None):
        return ctx["S"](x, dim, dtype, mask)

    def B(y, dy, dim=-1):
        return ctx["B"](y, dy, dim)

    def on_gpu():
        return ctx["gpu"]

    def sync():
        if on_gpu():
            torch.cuda.synchronize()

    # ---- tolerances: softmax_lab.testing.tolerance when present, else the brief's defaults; x10 for gradients
    def tol(dtype):
        try:
            from softmax_lab.testing import tolerance
            return tolerance(dtype)
        except Exception:
            return {f32: (1e-5, 1e-4), f16: (1e-2, 1e-2), bf16: (1e-2, 1e-2), f64: (1e-12, 1e-10)}[dtype]

    # relative-norm bounds ||got - ref|| / ||ref|| (widened to 4x torch's own in the same dtype when that is larger)
    REL = {f32: 2e-5, f16: 3e-3, bf16: 2e-2, f64: 1e-10}
    REL_Y = {f32: 1e-5, f16: 4e-3, bf16: 1e-2, f64: 1e-10}

    def rnd(shape, dtype, scale=3.0):
        shape = tuple(shape)
        if math.prod(shape) > (1 << 27):
            return torch.empty(shape, dtype=dtype, device=dev()).normal_(0.0, scale)
        return (torch.randn(shape, device=dev(), dtype=f32) * scale).to(dtype)

    def poison_pool(shape, dtype, k=3):
        """Leave NaN-filled blocks of dx's size in the caching allocator, so a new dx (or .grad) that a kernel does
        not fully write shows NaN instead of stale good values."""
        if not on_gpu():
            return
        bufs = [torch.full(tuple(shape), NAN, dtype=dtype, device=dev()) for _ in range(k)]
        del bufs

    def ref_bwd(y, dy, dim=-1):
        """dx = y (dy - sum(y dy)) on the float64 values of y and dy."""
        y64, dy64 = y.detach().double(), dy.detach().double()
        return y64 * (dy64 - (y64 * dy64).sum(dim, keepdim=True))

    def torch_bwd(y, dy, dim=-1):
        """torch's own backward in y's dtype (None where torch refuses)."""
        try:
            return torch._softmax_backward_data(dy.detach(), y.detach(), dim, y.dtype)
        except Exception:
            return None

    def ref_ag(x, g, dim=-1, dtype=None):
        """y and dL/dx for L = sum(softmax(x) * g), by autograd on float64 inputs."""
        x64 = x.detach().double().requires_grad_()
        y64 = torch.softmax(x64, dim)
        (y64 * g.detach().double()).sum().backward()
        return y64.detach(), x64.grad

    def torch_ag(x, g, dim=-1, dtype=None):
        """The same by torch itself in x's dtype (a baseline)."""
        xt = x.detach().clone().requires_grad_()
        yt = torch.softmax(xt, dim, dtype=dtype)
        (yt * g.detach()).sum().backward()
        return yt.detach(), xt.grad

    EPS = {f32: 2.0 ** -23, f16: 2.0 ** -10, bf16: 2.0 ** -8, f64: 2.0 ** -52}
    NAT_K = {f32: 1024, f16: 8, bf16: 8, f64: 1024}

    def natural(y, dy, dim, dtype):
        """A per-element bound from how dx = y (dy - s) rounds: K eps |y| (|dy| + |s| + sum |y dy|), plus fp16's
        subnormal steps (y of 1/65,536 is subnormal in fp16). The brief's tolerances (x10 for gradients) pass
        any dx of 16-bit rows whose values are ~1e-5; this one catches a few wrong elements among them."""
        y64, dy64 = y.detach().double(), dy.detach().double()
        ya, da = y64.abs(), dy64.abs()
        sa = (y64 * dy64).sum(dim, keepdim=True).abs()
        m = (ya * da).sum(dim, keepdim=True)
        bound = NAT_K[dtype] * EPS[dtype] * ya * (da + sa + m) + 1e-35
        if dtype == f16:
            bound = bound + 8 * 2.0 ** -24 * (da + sa + 1)
        return bound

    def stats(got, want, atol, rtol, floor=0.0, base=None, bound=None):
        g = got.detach().double()
        w = want.detach().double()
        gn, wn = g.isnan(), w.isnan()
        gi, wi = g.isinf(), w.isinf()
        fin = ~(gn | wn | gi | wi)
        err = torch.where(fin, (g - w).abs(), torch.zeros_like(w))
        nanmis = gn != wn
        infmis = (gi | wi) & ~(gn | wn) & (g != w)
        special_mis = nanmis | infmis
        alt, excused = None, 0
        over = err > atol + rtol * w.abs().where(fin, torch.zeros_like(w))
        nat = 0
        if bound is not None:
            natv = fin & (err > bound) & ~over
            nat = int(natv.sum())
            over = over | natv
        if base is not None:
            b = base.detach().double()
            if bool(special_mis.any()):
                like_torch = (gn == b.isnan()) & ((g == b) | ~(gi | b.isinf()))
                alt = int((special_mis & like_torch).sum())
                special_mis = special_mis & ~like_torch
            if bool(over.any()):  # torch-like: beyond the tolerance, but no more than twice torch's own error there
                berr = torch.where(fin & b.isfinite(), (b - w).abs(), torch.full_like(w, INF))
                like = over & (err <= 2 * berr)
                excused = int(like.sum())
                if nat:
                    nat = int((natv & ~like).sum())
                over = over & ~like
        bad = special_mis | over
        num = float(err.norm())
        den = float(w.where(fin, torch.zeros_like(w)).norm())
        return dict(bad=bad, nbad=int(bad.sum()), nanmis=int(nanmis.sum()), infmis=int(infmis.sum()), alt=alt,
                    excused=excused, nat=nat,
                    maxerr=float(err.max()) if err.numel() else 0.0, num=num, den=den,
                    relnorm=num / max(den, floor, 1e-300), g=g, w=w)

    def check(what, got, want, dtype, grad=True, base=None, scale=0.0, row_names=None, exp_dtype=None, nat=None):
        """(ok, text): ``got`` against the float64 ``want``; ``base``: torch's own result in ``dtype``; ``nat``:
        (y, dy, dim) of a backward, for the per-element bound ``natural`` on top of the tolerances."""
        exp_dtype = exp_dtype or dtype
        if got is None:
            return False, f"{what}: None (no gradient)"
        if tuple(got.shape) != tuple(want.shape):
            return False, f"{what}: SHAPE {tuple(got.shape)} != {tuple(want.shape)}"
        atol, rtol = tol(dtype)
        if grad:
            atol, rtol = atol * 10, rtol * 10
        floor = 0.05 * scale  # where the exact result nearly cancels (dy all equal, y.sum()), rounding of y*dy counts
        bound = natural(*nat, dtype) if nat is not None else None
        st = stats(got, want, atol, rtol, floor, base, bound)
        ok = st["nbad"] == 0
        msg = f"{what}: maxerr={st['maxerr']:.3g} relnorm={st['relnorm']:.2g}"
        lim = (REL if grad else REL_Y)[dtype]
        if base is not None:
            bst = stats(base, want, atol, rtol, floor)
            msg += f" (torch {DN[dtype]}: maxerr={bst['maxerr']:.3g} relnorm={bst['relnorm']:.2g})"
            lim = max(lim, 4 * bst["relnorm"])
        if st["excused"]:
            msg += (f" [{st['excused']} elems beyond the tolerance, within 2x torch {DN[dtype]}'s own error there; "
                    f"torch {DN[dtype]} itself: {bst['nbad']} beyond]")
        if st["alt"]:
            msg += f" [{st['alt']} NaN/inf placements differ from float64 but match torch {DN[dtype]}]"
        if st["nbad"]:
            bad = st["bad"]
            idx = tuple(bad.nonzero()[0].tolist())
            msg += (f" BAD {st['nbad']}/{bad.numel()} (NaN mismatches {st['nanmis']}, inf mismatches "
                    f"{st['infmis']}, within the x10 tolerance but past the per-element rounding bound "
                    f"{st['nat']}) first at {list(idx)}: got {float(st['g'][idx]):.6g} want "
                    f"{float(st['w'][idx]):.6g}" + (f" (bound {float(bound[idx]):.3g})" if bound is not None else ""))
            if bad.dim() >= 1 and bad.numel():
                rows = bad.reshape(-1, bad.shape[-1]).any(1).nonzero().flatten().tolist()
                shown = [f"{r}:{row_names[r]}" if row_names and r < len(row_names) else str(r) for r in rows[:8]]
                msg += f"; bad rows {len(rows)}/{bad.reshape(-1, bad.shape[-1]).shape[0]}: {shown}"
        if st["relnorm"] > lim:
            ok = False
            msg += f" STRICT: relnorm > {lim:.2g}"
        if got.dtype != exp_dtype:
            ok = False
            msg += f" DTYPE {got.dtype} != {exp_dtype}"
        return ok, msg

    def acc_new():
        return {"nbad": 0, "maxerr": 0.0, "num": 0.0, "den": 0.0, "bad_rows": [], "first": None, "dtype_ok": True}

    def acc_add(acc, r0, got, want, base, dtype, bound):
        """Judge rows r0.. of a large result (a chunk) and add to ``acc`` (memory: one chunk in float64 at a time)."""
        atol, rtol = tol(dtype)
        st = stats(got, want, atol * 10, rtol * 10, 0.0, base, bound)
        acc["dtype_ok"] &= got.dtype == dtype
        acc["nbad"] += st["nbad"]
        acc["maxerr"] = max(acc["maxerr"], st["maxerr"])
        acc["num"] = math.hypot(acc["num"], st["num"])
        acc["den"] = math.hypot(acc["den"], st["den"])
        if st["nbad"]:
            rows_bad = st["bad"].any(1).nonzero().flatten()
            acc["bad_rows"] += (rows_bad + r0).tolist()[:16]
            if acc["first"] is None:
                r, c = st["bad"].nonzero()[0].tolist()
                acc["first"] = (f"row {r + r0} col {c}: got {float(st['g'][r, c]):.6g} "
                                f"want {float(st['w'][r, c]):.6g}")

    def acc_result(acc, dtype, what=""):
        rel = acc["num"] / max(acc["den"], 1e-300)
        ok = acc["nbad"] == 0 and rel <= REL[dtype] and acc["dtype_ok"]
        msg = f"{what}maxerr={acc['maxerr']:.3g} relnorm={rel:.2g}"
        if acc["nbad"]:
            msg += (f" BAD {acc['nbad']} elems in {len(acc['bad_rows'])}+ rows e.g. {acc['bad_rows'][:8]}; "
                    f"first {acc['first']}")
        if rel > REL[dtype]:
            msg += f" STRICT: relnorm > {REL[dtype]:.2g}"
        if not acc["dtype_ok"]:
            msg += " DTYPE wrong"
        return ok, msg

    def check_chunked(what, dx, y, dy, dtype):
        """check() of a 2-D backward result, a chunk of rows at a time (every row; float64 references)."""
        acc = acc_new()
        rows, n = y.shape
        chunk = max(1, (1 << 25) // n)
        for r0 in range(0, rows, chunk):
            sl = slice(r0, r0 + chunk)
            acc_add(acc, r0, dx[sl], ref_bwd(y[sl], dy[sl]), torch_bwd(y[sl], dy[sl]), dtype,
                    natural(y[sl], dy[sl], -1, dtype))
        return acc_result(acc, dtype, f"{what}: ")

    def scale_of(y64, g):
        v = (y64.detach().double() * g.detach().double()).nan_to_num(0.0, 0.0, 0.0)
        return float(v.norm())

    def combine(*parts):
        return all(p[0] for p in parts), " | ".join(p[1] for p in parts)

    def timed(fn):
        sync()
        t = time.time()
        r = fn()
        sync()
        return r, time.time() - t

    def layout(t):
        return f"shape={tuple(t.shape)} stride={t.stride()} ptr%16={t.data_ptr() % 16}"

    # ---------------------------------------------------------------------------------------- case makers
    cases = []

    def add(name, fn, *tags):
        cases.append((name, fn, set(tags)))

    # A. autograd: y = softmax_lab.softmax(x, dim); (y * g).sum().backward()
    def ag(dtype, rows, n, dim=-1, tags=()):
        def fn():
            shape = (rows, n) if dim in (-1, 1) else (n, rows)
            x0 = rnd(shape, dtype)
            g = rnd(shape, dtype, 1.0)
            x = x0.clone().requires_grad_()
            poison_pool(shape, dtype)
            y = S(x, dim)
            _, t = timed(lambda: (y * g).sum().backward())
            y64, gx64 = ref_ag(x0, g, dim)
            yt, gxt = torch_ag(x0, g, dim)
            ok, det = combine(check("y", y, y64, dtype, grad=False, base=yt),
                              check("x.grad", x.grad, gx64, dtype, base=gxt, scale=scale_of(y64, g), nat=(y64, g, dim)))
            return ok, f"{det} bwd={t * 1e3:.1f}ms"
        add(f"autograd {DN[dtype]} {rows}x{n}" + (f" dim={dim}" if dim != -1 else ""), fn, *tags)

    # B. softmax_backward(y, dy, dim) directly, several calls with fresh tensors of one shape (a cached plan)
    def direct_repeat(dtype, rows, n, calls=3, mode="fresh", api="op"):
        def fn():
            res = []
            y = dy = None
            for k in range(calls):
                if mode == "fresh" or y is None:
                    with torch.no_grad():
                        y = S(rnd((rows, n), dtype))
                    dy = rnd((rows, n), dtype, 1.0)
                elif mode == "in place":  # the same tensors, new values
                    with torch.no_grad():
                        y.copy_(S(rnd((rows, n), dtype)))
                    dy.copy_(rnd((rows, n), dtype, 1.0))
                elif mode == "swap roles":  # y of one call, dy of the next: other pointers, other data
                    with torch.no_grad():
                        y, dy = S(rnd((rows, n), dtype)), y.clone() * 3
                poison_pool((rows, n), dtype)
                if api == "op":
                    dx, t = timed(lambda y=y, dy=dy: B(y, dy, -1))
                elif api == "torch.ops":
                    dx, t = timed(lambda y=y, dy=dy: torch.ops.softmax_lab.softmax_backward(y, dy, -1)
                                  if not opts["fake"] else B(y, dy, -1))
                else:  # dim given as the positive last dim
                    dx, t = timed(lambda y=y, dy=dy: B(y, dy, 1))
                ok, det = check(f"call{k + 1} ({t * 1e3:.1f}ms) dx", dx, ref_bwd(y, dy), dtype,
                                base=torch_bwd(y, dy), scale=scale_of(y.double(), dy), nat=(y, dy, -1))
                res.append((ok, det))
            return combine(*res)
        add(f"softmax_backward x{calls} ({mode}{', ' + api if api != 'op' else ''}) {DN[dtype]} {rows}x{n}", fn)

    def direct_alternate(dtype, shapes, name):
        """Calls alternating between kinds of input (shapes, alignments), each with fresh data."""
        def fn():
            res = []
            for k, make in enumerate(shapes * 2):
                y, dy = make()
                poison_pool(tuple(y.shape), dtype)
                dx = B(y, dy, -1)
                ok, det = check(f"call{k + 1} {tuple(y.shape)} ptr%16={y.data_ptr() % 16}/{dy.data_ptr() % 16}",
                                dx, ref_bwd(y, dy), dtype, base=torch_bwd(y, dy), scale=scale_of(y.double(), dy),
                                nat=(y, dy, -1))
                res.append((ok, det))
            return combine(*res)
        add(f"softmax_backward alternating {name}", fn)

    def yd(dtype, rows, n, pad=0, off=0, off_dy=None, pad_dy=None):
        """(y, dy): softmax rows (y) and gradients (dy), each possibly a view of a wider buffer (row stride n+pad,
        first element `off` in)."""
        def view(t_full_fn, p, o):
            if p == 0 and o == 0:
                return t_full_fn((rows, n))
            buf = t_full_fn((rows, n + p))
            return buf[:, o:o + n]

        def make():
            def ysrc(shape):
                with torch.no_grad():
                    return S(rnd(shape, dtype))

            y = view(ysrc, pad, off)
            dy = view(lambda s: rnd(s, dtype, 1.0), pad if pad_dy is None else pad_dy,
                      off if off_dy is None else off_dy)
            return y, dy
        return make

    # C. direct calls on views / layouts
    def direct_view(name, make, dtype, dim=-1, row_names=None):
        def fn():
            y, dy = make()
            poison_pool(tuple(y.shape), dtype)
            dx = B(y, dy, dim)
            ok, det = check("dx", dx, ref_bwd(y, dy, dim), dtype, base=torch_bwd(y, dy, dim),
                            scale=scale_of(y.double(), dy), nat=(y, dy, dim), row_names=row_names)
            if ok:  # again with new tensors laid out alike: the cached plan
                y2, dy2 = make()
                poison_pool(tuple(y2.shape), dtype)
                ok2, det2 = check("2nd call dx", B(y2, dy2, dim), ref_bwd(y2, dy2, dim), dtype,
                                  base=torch_bwd(y2, dy2, dim), scale=scale_of(y2.double(), dy2), nat=(y2, dy2, dim))
                ok, det = ok and ok2, det + " | " + det2
            return ok, f"{det} y:{layout(y)} dy:{layout(dy)}"
        add(f"softmax_backward {DN[dtype]} {name}", fn)

    def at_offset(t, off):
        """A copy of contiguous ``t`` that starts ``off`` elements into a flat buffer (a view, contiguous)."""
        buf = torch.full((t.numel() + 16,), NAN, dtype=t.dtype, device=t.device)
        v = buf[off:off + t.numel()].view(t.shape)
        v.copy_(t)
        return v

    def flat_pair(dtype, rows, n, off):
        def make():
            with torch.no_grad():
                y = S(rnd((rows, n), dtype))
            return at_offset(y, off), at_offset(rnd((rows, n), dtype, 1.0), off)
        return make

    # D. autograd through views of a leaf buffer (its .grad is the scatter of dx)
    def ag_view(name, dtype, buf_shape, take, dim=-1):
        def fn():
            buf0 = rnd(buf_shape, dtype)
            buf = buf0.clone().requires_grad_()
            x = take(buf)
            g = rnd(tuple(x.shape), dtype, 1.0)
            poison_pool(tuple(x.shape), dtype)
            y = S(x, dim)
            (y * g).sum().backward()
            b64 = buf0.double().requires_grad_()
            y64 = torch.softmax(take(b64), dim)
            (y64 * g.double()).sum().backward()
            bt = buf0.clone().requires_grad_()
            yt = torch.softmax(take(bt), dim)
            (yt * g).sum().backward()
            ok, det = combine(check("y", y, y64, dtype, grad=False, base=yt.detach()),
                              check("buf.grad", buf.grad, b64.grad, dtype, base=bt.grad, scale=scale_of(y64, g)))
            return ok, f"{det} x:{layout(x)}"
        add(f"autograd view {DN[dtype]} {name}", fn)

    # E. special values
    def special_dy(dtype, rows_n, one_at_a_time=False):
        n = rows_n

        def make():
            names, ys, dys = [], [], []

            def a(name, y, dy):
                names.append(name)
                ys.append(y.to(dtype))
                dys.append(dy.to(dtype))

            def sm(v):
                return torch.softmax(v.float(), -1)

            def xr():
                return torch.randn(n, device=dev()) * 3

            def dr():
                return torch.randn(n, device=dev())
            a("normal", sm(xr()), dr())
            y = torch.zeros(n, device=dev())
            y[n // 3] = 1.0
            a("one-hot y", y, dr())
            y = torch.zeros(n, device=dev())
            y[n - 1] = 1.0
            a("one-hot y at last col", y, dr())
            a("all-equal y (1/n)", torch.full((n,), 1.0 / n, device=dev()), dr())
            a("dy +-1e4", sm(xr()), torch.where(torch.rand(n, device=dev()) < 0.5, -1e4, 1e4))
            a("dy 1e4*randn", sm(xr()), dr() * 1e4)
            v = dr()
            v[n // 2 + 7] = NAN
            a("dy NaN mid", sm(xr()), v)
            v = dr()
            v[0] = NAN
            a("dy NaN first col", sm(xr()), v)
            v = dr()
            v[n // 2] = INF
            a("dy +inf mid (y>0)", sm(xr()), v)
            v = dr()
            v[n - 1] = -INF
            a("dy -inf last col (y>0)", sm(xr()), v)
            v = dr()
            v[5] = INF
            v[n - 5] = -INF
            a("dy +inf and -inf", sm(xr()), v)
            xv = xr()
            xv[: n // 2] = -INF
            v = dr()
            v[3] = INF
            a("dy +inf where y==0", sm(xv), v)
            xv = xr()
            xv[torch.rand(n, device=dev()) < 0.5] = -INF
            a("y half zeros (x -inf)", sm(xv), dr())
            a("dy all equal 3.0", sm(xr()), torch.full((n,), 3.0, device=dev()))
            a("dy all 0", sm(xr()), torch.zeros(n, device=dev()))
            y = torch.zeros(n, device=dev())
            y[n // 4] = 1.0
            v = dr()
            v[n // 4] = INF
            a("y one-hot, dy +inf at the hot col", y, v)
            a("normal after the bad rows", sm(xr()), dr())
            return torch.stack(ys), torch.stack(dys), names

        def fn():
            y, dy, names = make()
            if not one_at_a_time:
                poison_pool(tuple(y.shape), dtype)
                dx = B(y, dy, -1)
                return check("dx", dx, ref_bwd(y, dy), dtype, base=torch_bwd(y, dy), scale=scale_of(y.double(), dy),
                             nat=(y, dy, -1), row_names=names)
            res = []
            for i, nm in enumerate(names):
                yi, dyi = y[i:i + 1].clone(), dy[i:i + 1].clone()
                ok, det = check(f"[{nm}]", B(yi, dyi, -1), ref_bwd(yi, dyi), dtype, base=torch_bwd(yi, dyi),
                                scale=scale_of(yi.double(), dyi), nat=(yi, dyi, -1))
                if not ok:
                    res.append((ok, det))
            return combine(*res) if res else (True, f"all {len(names)} single rows ok")
        add(f"special y/dy rows {DN[dtype]} n={n}" + (" one row at a time" if one_at_a_time else ""), fn)

    def special_x(dtype, n):
        """Autograd on rows with -inf, all-equal, one-hot-by-spike, NaN and +inf inputs."""
        def make():
            names, xs = [], []

            def a(name, v):
                names.append(name)
                xs.append(v)

            def xr():
                return torch.randn(n, device=dev()) * 3
            a("normal", xr())
            v = xr()
            v[: n // 2] = -INF
            a("first half -inf", v)
            v = xr()
            v[0] = -INF
            v[n - 1] = -INF
            a("-inf at first and last col", v)
            v = xr()
            v[torch.rand(n, device=dev()) < 0.9] = -INF
            a("90% -inf", v)
            v = torch.full((n,), -INF, device=dev())
            v[n // 2] = 1.0
            a("all -inf but one (one-hot y)", v)
            a("all -inf (NaN row)", torch.full((n,), -INF, device=dev()))
            a("all equal 7.5", torch.full((n,), 7.5, device=dev()))
            v = torch.zeros(n, device=dev())
            v[n // 5] = 1e4
            a("spike 1e4 (one-hot y)", v)
            v = xr()
            v[n // 2 + 1] = NAN
            a("NaN in x", v)
            v = xr()
            v[n - 1] = INF
            a("+inf in x at last col", v)
            a("x ~ 1e4*rand", torch.rand(n, device=dev()) * 1e4)
            a("normal after the bad rows", xr())
            return torch.stack(xs).to(dtype), names

        def fn():
            x0, names = make()
            g = rnd(tuple(x0.shape), dtype, 1.0)
            x = x0.clone().requires_grad_()
            poison_pool(tuple(x0.shape), dtype)
            y = S(x)
            (y * g).sum().backward()
            y64, gx64 = ref_ag(x0, g)
            yt, gxt = torch_ag(x0, g)
            return combine(check("y", y, y64, dtype, grad=False, base=yt, row_names=names),
                           check("x.grad", x.grad, gx64, dtype, base=gxt, scale=scale_of(y64, g), nat=(y64, g, -1),
                                 row_names=names))
        add(f"special x rows, autograd {DN[dtype]} n={n}", fn)

    # ---------------------------------------------------------------------------------------- the cases
    # 0. which kernels the backward launches (information; it needs the profiler)
    def kernel_names():
        from torch.profiler import ProfilerActivity, profile
        shapes = [(bf16, 3, 16376, 0), (bf16, 3, 16384, 0), (bf16, 3, 65536, 0), (bf16, 3, 65536, 1),
                  (bf16, 3, 262144, 0), (bf16, 3, 262152, 0), (f16, 3, 50257, 0), (f32, 3, 16384, 0),
                  (f32, 3, 16388, 0), (f32, 3, 163840, 0), (f32, 3, 163844, 0)]
        out, ok_all = [], True
        for dtype, rows, n, off in shapes:
            y, dy = yd(dtype, rows, n, pad=8 if off else 0, off=off)()
            dx = B(y, dy)  # compile outside the profile
            ok, _ = check("dx", dx, ref_bwd(y, dy), dtype, base=torch_bwd(y, dy))
            ok_all &= ok
            sync()
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:
                B(y, dy)
                sync()
            names = set()
            for e in p.events():
                if "CUDA" in str(getattr(e, "device_type", "")) and not e.name.startswith(("Memcpy", "Memset")):
                    names.add(e.name)
            tag = f"{DN[dtype]} {rows}x{n}" + (" (1 elem in)" if off else "")
            out.append(f"{tag}: {sorted(names) or '(no CUDA kernel seen)'}{'' if ok else ' WRONG'}")
        return ok_all, "; ".join(out)
    add("backward kernel names by shape (profiler; information)", kernel_names, "gpu")

    # 1. autograd at and around the range borders
    for n in (16376, 16384, 16392):
        for rows in (1, 3, 1000):
            ag(bf16, rows, n)
        for rows in (3, 1000):
            ag(f16, rows, n)
    for n in (16384, 16385, 16388, 163836, 163840, 163844):
        ag(f32, 3, n)
    for n in (16388, 163840):
        ag(f32, 1, n)
        ag(f32, 1000, n)
    for rows in (1, 3, 1000):
        ag(bf16, rows, 262144)
    ag(bf16, 3, 262152)
    ag(f16, 3, 262144)
    ag(f16, 3, 262136)

    # 2. direct softmax_backward, repeated with new tensors (the cached plan)
    direct_repeat(bf16, 3, 16384)
    direct_repeat(bf16, 1000, 65536)
    direct_repeat(f16, 3, 262144)
    direct_repeat(f32, 3, 16388)
    direct_repeat(f32, 1000, 163840)
    direct_repeat(f32, 1, 151936)
    direct_repeat(bf16, 1, 128256)
    direct_repeat(bf16, 3, 65536, calls=4, mode="in place")
    direct_repeat(f32, 3, 32000, calls=4, mode="swap roles")
    direct_repeat(bf16, 2, 81920, api="torch.ops")
    direct_repeat(f16, 3, 16384, api="dim=1")
    direct_alternate(bf16, [yd(bf16, 3, 65536), yd(bf16, 3, 65536, pad=8, off=1), yd(bf16, 3, 65536, pad=8)],
                     "bf16 3x65536: contiguous / 1 elem in / padded rows")
    direct_alternate(f32, [yd(f32, 3, 32000), yd(f32, 5, 32000), yd(f32, 3, 32004), yd(f32, 3, 16388)],
                     "fp32 3x32000 / 5x32000 / 3x32004 / 3x16388")
    direct_alternate(bf16, [flat_pair(bf16, 3, 65536, 8), flat_pair(bf16, 3, 65536, 4), yd(bf16, 3, 65536)],
                     "bf16 3x65536 in a flat buffer 16 B in / 8 B in / contiguous")

    def burst(dtype, shapes, calls=8):
        def fn():
            sets = []
            for k in range(calls):
                rows, n = shapes[k % len(shapes)]
                y, dy = yd(dtype, rows, n)()
                sets.append((y, dy))
            sync()
            outs = [B(y, dy) for y, dy in sets]  # queued back to back, no sync between
            sync()
            res = [check(f"call{k + 1}", dx, ref_bwd(y, dy), dtype, scale=scale_of(y.double(), dy), nat=(y, dy, -1))
                   for k, (dx, (y, dy)) in enumerate(zip(outs, sets, strict=True))]
            bad = [r for r in res if not r[0]]
            if bad:
                return combine(*bad)
            return True, f"{len(res)} calls ok; worst " + max((r[1] for r in res), key=lambda s: float(
                s.split("relnorm=")[1].split()[0]))
        add(f"burst of {calls} backward calls without sync {DN[dtype]} {shapes}", fn)
    burst(bf16, [(64, 65536)])
    burst(f32, [(64, 32000), (3, 163840)])

    # 3. special values
    for dtype, n in ((bf16, 65536), (f16, 16384), (f32, 16388), (f32, 163840), (bf16, 262144), (bf16, 16376),
                     (f16, 50257)):
        special_dy(dtype, n)
    special_dy(bf16, 65536, one_at_a_time=True)
    special_dy(f32, 32000, one_at_a_time=True)
    for dtype, n in ((bf16, 65536), (f16, 16384), (f32, 16388), (bf16, 262144), (f32, 163840)):
        special_x(dtype, n)

    # 4. views and layouts, direct
    direct_view("3x65536 rows of a 3x65600 buffer (aligned stride)", yd(bf16, 3, 65536, pad=64), bf16)
    direct_view("3x65536 rows of a 3x65537 buffer (odd stride)", yd(bf16, 3, 65536, pad=1), bf16)
    direct_view("3x65536 = buf[:, 1:] of 3x65544 (rows start 2 B off)", yd(bf16, 3, 65536, pad=8, off=1), bf16)
    direct_view("3x65536 = buf[:, 8:] of 3x65544 (16 B in, aligned)", yd(bf16, 3, 65536, pad=8, off=8), bf16)
    direct_view("1000x16384 = buf[:, 4:] of 1000x16392 (8 B in)", yd(bf16, 1000, 16384, pad=8, off=4), bf16)
    direct_view("3x32000 rows of 3x32004 (aligned stride)", yd(f32, 3, 32000, pad=4), f32)
    direct_view("3x16388 rows of 3x16389 (odd stride)", yd(f32, 3, 16388, pad=1), f32)
    direct_view("3x163840 = buf[:, 1:] of 3x163844", yd(f32, 3, 163840, pad=4, off=1), f32)
    direct_view("3x163840 = buf[:, 4:] of 3x163844 (16 B in)", yd(f32, 3, 163840, pad=4, off=4), f32)
    direct_view("y contiguous, dy = buf[:, 1:] (mixed alignment)", yd(bf16, 3, 65536, off_dy=1, pad_dy=8), bf16)
    direct_view("y = buf[:, 1:], dy contiguous (mixed alignment)", yd(bf16, 3, 65536, pad=8, off=1, pad_dy=0,
                                                                         off_dy=0), bf16)
    direct_view("y contiguous, dy rows of a padded buffer (strides differ)", yd(f32, 3, 32000, pad_dy=64, off_dy=0),
                f32)
    direct_view("3x16388, y and dy 8 B into flat buffers", flat_pair(f32, 3, 16388, 2), f32)
    direct_view("3x16388, y and dy 16 B into flat buffers", flat_pair(f32, 3, 16388, 4), f32)
    direct_view("3x65536, y and dy 8 B into flat buffers", flat_pair(bf16, 3, 65536, 4), bf16)

    def rows_of(dtype, rows, n, how):
        def make():
            if how == "[1:]":
                y = S(rnd((rows + 1, n), dtype))[1:]
                dy = rnd((rows + 1, n), dtype, 1.0)[1:]
            elif how == "[::2]":
                y = S(rnd((2 * rows, n), dtype))[::2]
                dy = rnd((2 * rows, n), dtype, 1.0)[::2]
            elif how == "t()":
                y = S(rnd((n, rows), dtype), 0).t()
                dy = rnd((n, rows), dtype, 1.0).t()
            elif how == "overlapping (unfold)":
                base = S(rnd((rows * 1024 + n,), dtype), 0)
                y = base.unfold(0, n, 1024)[:rows]
                dy = rnd((rows * 1024 + n,), dtype, 1.0).unfold(0, n, 1024)[:rows]
            elif how == "dy expand(rows, n) of 1xn":
                y = S(rnd((rows, n), dtype))
                dy = rnd((1, n), dtype, 1.0).expand(rows, n)
            elif how == "dy scalar expand":
                y = S(rnd((rows, n), dtype))
                dy = torch.full((), 0.75, dtype=dtype, device=dev()).expand(rows, n)
            elif how == "dy ones(rows,1).expand":
                y = S(rnd((rows, n), dtype))
                dy = rnd((rows, 1), dtype, 1.0).expand(rows, n)
            elif how == "y expand of 1xn":
                y = S(rnd((1, n), dtype)).expand(rows, n)
                dy = rnd((rows, n), dtype, 1.0)
            elif how == "dy is y":
                y = S(rnd((rows, n), dtype))
                dy = y
            return y, dy
        return make
    for how in ("[1:]", "[::2]", "t()", "overlapping (unfold)", "dy expand(rows, n) of 1xn", "dy scalar expand",
                "dy ones(rows,1).expand", "y expand of 1xn", "dy is y"):
        direct_view(f"4x65536 {how}", rows_of(bf16, 4, 65536, how), bf16)
    for how in ("[1:]", "t()", "dy expand(rows, n) of 1xn", "dy is y"):
        direct_view(f"4x16388 {how}", rows_of(f32, 4, 16388, how), f32)

    def nd(dtype, shape, dim, permute=None):
        def make():
            with torch.no_grad():
                if permute:
                    base = rnd(shape, dtype)
                    y = S(base.permute(*permute), dim)
                    dy = rnd(shape, dtype, 1.0).permute(*permute)
                else:
                    y = S(rnd(shape, dtype), dim)
                    dy = rnd(shape, dtype, 1.0)
            return y, dy
        return make
    direct_view("3-D 2x3x65536 dim=-1", nd(bf16, (2, 3, 65536), -1), bf16)
    direct_view("3-D 2x3x65536 dim=2", nd(bf16, (2, 3, 65536), 2), bf16, dim=2)
    direct_view("3-D 4x8x32000 dim=-1", nd(f32, (4, 8, 32000), -1), f32)
    direct_view("3-D 2x16384x3 dim=1", nd(bf16, (2, 16384, 3), 1), bf16, dim=1)
    direct_view("2-D 16388x3 dim=0", nd(f32, (16388, 3), 0), f32, dim=0)
    direct_view("3-D permute(1,0,2) of 3x2x65536 dim=-1", nd(bf16, (3, 2, 65536), -1, (1, 0, 2)), bf16)

    # 5. views and layouts, autograd
    ag_view("x = buf[:, 1:] of 3x65537 (rows off 16 B)", bf16, (3, 65537), lambda b: b[:, 1:])
    ag_view("x = buf[:, :65536] of 3x65544 (aligned)", bf16, (3, 65544), lambda b: b[:, :65536])
    ag_view("x = buf[:, 4:] of 3x16392 (16 B in)", f32, (3, 16392), lambda b: b[:, 4:])
    ag_view("x = buf[:, 1:] of 3x16389", f32, (3, 16389), lambda b: b[:, 1:])
    ag_view("dim=0 of x.t(), x 3x65536", bf16, (3, 65536), lambda b: b.t(), dim=0)
    ag_view("dim=0 of x.t(), x 5x16388", f32, (5, 16388), lambda b: b.t(), dim=0)
    ag_view("dim=-1 of x.t(), x 16384x3", f16, (16384, 3), lambda b: b.t(), dim=-1)
    ag_view("3-D 2x4x65536 dim=-1", bf16, (2, 4, 65536), lambda b: b)
    ag_view("3-D 4x8x32000 dim=2", f32, (4, 8, 32000), lambda b: b, dim=2)
    ag_view("3-D 2x16384x3 dim=1", bf16, (2, 16384, 3), lambda b: b, dim=1)
    ag_view("3-D 2x3x65536 transpose(0,1) dim=-1", bf16, (2, 3, 65536), lambda b: b.transpose(0, 1))

    def ag_reduce(dtype, shape, how):
        def fn():
            x0 = rnd(shape, dtype)
            x = x0.clone().requires_grad_()
            y = S(x)
            x64 = x0.double().requires_grad_()
            y64 = torch.softmax(x64, -1)
            xt = x0.clone().requires_grad_()
            yt = torch.softmax(xt, -1)
            yn = float(y64.detach().norm())
            if how == "y.sum()":
                sc = yn
                for yy in (y, y64, yt):
                    yy.sum().backward()
            elif how == "y.mean()":
                sc = yn / y.numel()
                for yy in (y, y64, yt):
                    yy.mean().backward()
            elif how == "y[:, ::3].sum() * 2":
                sc = 2 * yn / math.sqrt(3)
                for yy in (y, y64, yt):
                    (yy[:, ::3].sum() * 2).backward()
            elif how == "y.backward(fp32 grad)":
                gg = rnd(shape, f32, 1.0)
                sc = scale_of(y64.detach(), gg)
                y.backward(gg)
                y64.backward(gg.double())
                yt.backward(gg)
            elif how == "accumulate: 2 backward into preset .grad":
                gg = rnd(shape, dtype, 1.0)
                sc = 2 * scale_of(y64.detach(), gg)
                g0 = rnd(shape, dtype, 1e-3)
                x.grad = g0.clone()
                x64.grad = g0.double().clone()
                xt.grad = g0.clone()
                for yy, gw in ((y, gg), (y64, gg.double()), (yt, gg)):
                    (yy * gw).sum().backward(retain_graph=True)
                    (yy * gw).sum().backward()
            return check("x.grad", x.grad, x64.grad, dtype, base=xt.grad, scale=sc)
        add(f"autograd {how} {DN[dtype]} {shape}", fn)
    for how in ("y.sum()", "y.mean()", "y[:, ::3].sum() * 2", "y.backward(fp32 grad)",
                "accumulate: 2 backward into preset .grad"):
        ag_reduce(bf16, (3, 65536), how)
    ag_reduce(f32, (3, 16388), "y.sum()")
    ag_reduce(f32, (3, 163840), "accumulate: 2 backward into preset .grad")

    def ag_dtype_arg(in_dtype, out_dtype, shape):
        def fn():
            x0 = rnd(shape, in_dtype)
            g = rnd(shape, out_dtype, 1.0)
            x = x0.clone().requires_grad_()
            y = S(x, -1, dtype=out_dtype)
            (y * g).sum().backward()
            y64, gx64 = ref_ag(x0, g)
            yt, gxt = torch_ag(x0, g, dtype=out_dtype)
            # the gradient passes through y in out_dtype: judged with the looser of the two dtypes' tolerances
            loose = out_dtype if tol(out_dtype)[1] > tol(in_dtype)[1] else in_dtype
            return combine(check("y", y, y64, out_dtype, grad=False, base=yt),
                           check("x.grad", x.grad, gx64, loose, base=gxt, scale=scale_of(y64, g), exp_dtype=in_dtype))
        add(f"autograd dtype= {DN[in_dtype]}->{DN[out_dtype]} {shape}", fn)
    ag_dtype_arg(bf16, f32, (3, 65536))
    ag_dtype_arg(f32, bf16, (3, 65536))

    # 6. CUDA graphs: a training step (forward + backward) captured and replayed with new data
    def graph_train(dtype, shape, warm=True, weight=True):
        """weight: softmax(x * w) with a parameter w; without, softmax(x), whose x.grad is the backward's own dx."""
        def fn():
            rows, n = shape
            x = rnd(shape, dtype).requires_grad_()
            w = torch.nn.Parameter((1 + 0.1 * torch.randn(n, device=dev())).to(dtype), requires_grad=weight)
            g = rnd(shape, dtype, 1.0)

            def step():
                y = S(x * w if weight else x, -1)
                (y * g).sum().backward()
                return y
            if warm:
                s = torch.cuda.Stream()
                s.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(s):
                    for _ in range(3):
                        x.grad = w.grad = None
                        step()
                torch.cuda.current_stream().wait_stream(s)
            sync()
            x.grad = w.grad = None
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                y_static = step()
            sync()
            res = []
            for k in range(3):
                with torch.no_grad():
                    x.copy_(rnd(shape, dtype))
                    w.copy_((1 + 0.1 * torch.randn(n, device=dev())).to(dtype))
                    g.copy_(rnd(shape, dtype, 1.0))
                    x.grad.fill_(NAN)
                    if weight:
                        w.grad.fill_(NAN)
                    y_static.fill_(NAN)
                graph.replay()
                sync()
                x64 = x.detach().double().requires_grad_()
                w64 = w.detach().double().requires_grad_(weight)
                y64 = torch.softmax(x64 * w64 if weight else x64, -1)
                (y64 * g.double()).sum().backward()
                xt = x.detach().clone().requires_grad_()
                wt = w.detach().clone().requires_grad_(weight)
                yt = torch.softmax(xt * wt if weight else xt, -1)
                (yt * g).sum().backward()
                sc = scale_of(y64.detach(), g)
                parts = [check(f"replay{k + 1} y", y_static, y64.detach(), dtype, grad=False, base=yt.detach()),
                         check("x.grad", x.grad, x64.grad, dtype, base=xt.grad, scale=sc,
                               nat=None if weight else (y64.detach(), g, -1))]
                if weight:
                    parts.append(check("w.grad", w.grad, w64.grad, dtype, base=wt.grad))
                res.append(combine(*parts))
            return combine(*res)
        add(f"cuda-graph train step{'' if warm else ' NO warm-up'} {DN[dtype]} {shape[0]}x{shape[1]}"
            f"{' softmax(x * w)' if weight else ' softmax(x)'}", fn, "gpu")
    graph_train(bf16, (4, 65536))
    graph_train(f32, (2, 163840))
    graph_train(f16, (3, 16384), weight=False)
    graph_train(bf16, (2, 262144), weight=False)
    graph_train(f32, (3, 40000), warm=False)  # a width no other case uses: kernels compiled inside the capture

    def graph_direct(dtype, shape, eager_first):
        def fn():
            res = []
            if eager_first:  # a plan made eagerly with other tensors of the same kind
                y, dy = yd(dtype, *shape)()
                res.append(check("eager before", B(y, dy), ref_bwd(y, dy), dtype, scale=scale_of(y.double(), dy),
                                 nat=(y, dy, -1)))
            ys, dys = yd(dtype, *shape)()
            sync()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                dx = B(ys, dys)
            sync()
            for k in range(3):
                y, dy = yd(dtype, *shape)()
                ys.copy_(y)
                dys.copy_(dy)
                dx.fill_(NAN)
                graph.replay()
                sync()
                res.append(check(f"replay{k + 1}", dx, ref_bwd(ys, dys), dtype, scale=scale_of(ys.double(), dys),
                                 nat=(ys, dys, -1)))
                if eager_first and k == 1:  # an eager call between two replays
                    y2, dy2 = yd(dtype, *shape)()
                    res.append(check("eager between", B(y2, dy2), ref_bwd(y2, dy2), dtype,
                                     scale=scale_of(y2.double(), dy2), nat=(y2, dy2, -1)))
            return combine(*res)
        add(f"cuda-graph softmax_backward {'after an eager call' if eager_first else 'NO warm-up, new width'} "
            f"{DN[dtype]} {shape[0]}x{shape[1]}", fn, "gpu")
    graph_direct(bf16, (4, 65536), True)
    graph_direct(bf16, (3, 24576), False)
    graph_direct(f32, (3, 20004), False)

    # 7. torch.compile(fullgraph=True)
    def compile_train(dtype, shape, calls=2):
        def fn():
            import torch._dynamo
            torch._dynamo.reset()
            rows, n = shape

            sm = ctx["raw_S"]

            def f(x, w, g):
                return (sm(x * w, -1) * g).sum()
            cf = torch.compile(f, fullgraph=True)
            res = []
            for k in range(calls):
                x0 = rnd(shape, dtype)
                w0 = (1 + 0.1 * torch.randn(n, device=dev())).to(dtype)
                g = rnd(shape, dtype, 1.0)
                x = x0.clone().requires_grad_()
                w = w0.clone().requires_grad_()
                _, t = timed(lambda x=x, w=w, g=g: cf(x, w, g).backward())
                x64, w64 = x0.double().requires_grad_(), w0.double().requires_grad_()
                y64 = torch.softmax(x64 * w64, -1)
                (y64 * g.double()).sum().backward()
                xt, wt = x0.clone().requires_grad_(), w0.clone().requires_grad_()
                (torch.softmax(xt * wt, -1) * g).sum().backward()
                res.append(combine(check(f"call{k + 1} ({t:.1f}s) x.grad", x.grad, x64.grad, dtype, base=xt.grad,
                                         scale=scale_of(y64.detach(), g)),
                                   check("w.grad", w.grad, w64.grad, dtype, base=wt.grad)))
            return combine(*res)
        add(f"torch.compile(fullgraph=True) fwd+bwd {DN[dtype]} {shape[0]}x{shape[1]}", fn, "gpu")

    def compile_direct(dtype, shape, calls=3):
        def fn():
            import torch._dynamo
            torch._dynamo.reset()
            bw = ctx["raw_B"]
            cf = torch.compile(lambda y, dy: bw(y, dy, -1), fullgraph=True)
            res = []
            for k in range(calls):
                y, dy = yd(dtype, *shape)()
                dx, t = timed(lambda y=y, dy=dy: cf(y, dy))
                res.append(check(f"call{k + 1} ({t:.1f}s)", dx, ref_bwd(y, dy), dtype, base=torch_bwd(y, dy),
                                 scale=scale_of(y.double(), dy), nat=(y, dy, -1)))
            return combine(*res)
        add(f"torch.compile(fullgraph=True) of softmax_backward {DN[dtype]} {shape[0]}x{shape[1]}", fn, "gpu")
    compile_train(bf16, (3, 65536))
    compile_direct(f16, (3, 262144))
    compile_train(f32, (2, 16388))

    # 8. more than 2**31 elements
    def huge(dtype, rows, n, how):
        def fn():
            chunk = max(1, (1 << 25) // n)
            if how == "direct":
                with torch.no_grad():
                    x = rnd((rows, n), dtype)
                    y = S(x)
                    x.fill_(NAN)  # its block goes back to the allocator: poisoned too
                    del x
                dy = rnd((rows, n), dtype, 1.0)
                poison_pool((rows, n), dtype, k=1)
                dx, t = timed(lambda: B(y, dy))
                ok, det = check_chunked("dx", dx, y, dy, dtype)  # every row, in float64, a chunk at a time
            else:
                acc = acc_new()
                x = rnd((rows, n), dtype).requires_grad_()
                g = rnd((rows, n), dtype, 1.0)
                y = S(x)
                _, t = timed(lambda: (y * g).sum().backward())
                del y
                for r0 in range(0, rows, chunk):
                    sl = slice(r0, r0 + chunk)
                    y64, gx64 = ref_ag(x[sl], g[sl])
                    acc_add(acc, r0, x.grad[sl], gx64, None, dtype, natural(y64, g[sl], -1, dtype))
                ok, det = acc_result(acc, dtype, "x.grad: ")
            return ok, f"numel={rows * n} (>2**31: {rows * n > 2 ** 31}) bwd={t * 1e3:.0f}ms all {rows} rows: {det}"
        add(f"huge >2**31 elements: {how} backward {DN[dtype]} {rows}x{n}", fn, "gpu", "huge")
    huge(bf16, 16385, 131072, "direct")
    huge(bf16, 16385, 131072, "autograd")
    huge(bf16, 8193, 262144, "direct")
    huge(f32, 16385, 131072, "direct")

    # 9. streams, no_grad / inference_mode
    def side_stream(dtype, shape, where):
        def fn():
            x0 = rnd(shape, dtype)
            g = rnd(shape, dtype, 1.0)
            x = x0.clone().requires_grad_()
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            if where == "fwd+bwd on side stream":
                with torch.cuda.stream(s):
                    y = S(x)
                    (y * g).sum().backward()
            else:  # forward on the default stream, backward() called under a side stream
                y = S(x)
                loss = (y * g).sum()
                s.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(s):
                    loss.backward()
                torch.cuda.current_stream().wait_stream(s)
            sync()
            y64, gx64 = ref_ag(x0, g)
            yt, gxt = torch_ag(x0, g)
            return combine(check("y", y, y64, dtype, grad=False, base=yt),
                           check("x.grad", x.grad, gx64, dtype, base=gxt, scale=scale_of(y64, g), nat=(y64, g, -1)))
        add(f"stream: {where} {DN[dtype]} {shape[0]}x{shape[1]}", fn, "gpu")
    side_stream(bf16, (64, 65536), "fwd+bwd on side stream")
    side_stream(f32, (64, 16388), "backward() under a side stream")

    def two_streams(dtype, shape, calls=8):
        def fn():
            s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
            sets = [yd(dtype, *shape)() for _ in range(calls)]
            sync()
            outs = []
            for k, (y, dy) in enumerate(sets):
                with torch.cuda.stream(s1 if k % 2 == 0 else s2):
                    outs.append(B(y, dy))
            sync()
            res = [check(f"call{k + 1}", dx, ref_bwd(y, dy), dtype, scale=scale_of(y.double(), dy), nat=(y, dy, -1))
                   for k, (dx, (y, dy)) in enumerate(zip(outs, sets, strict=True))]
            bad = [r for r in res if not r[0]]
            return combine(*bad) if bad else (True, f"{calls} calls on 2 streams ok; call1: {res[0][1]}")
        add(f"two streams, {calls} backward calls interleaved {DN[dtype]} {shape[0]}x{shape[1]}", fn, "gpu")
    two_streams(bf16, (512, 65536))
    two_streams(f32, (256, 163840))

    def no_grad_then_backward(dtype, shape, mode):
        def fn():
            x0 = rnd(shape, dtype)
            x = x0.clone().requires_grad_()
            dy = rnd(shape, dtype, 1.0)
            if mode == "no_grad":
                with torch.no_grad():
                    y = S(x)
                dx = B(y, dy, -1)
            else:
                with torch.inference_mode():
                    y = S(x0)
                    dx = B(y, dy, -1)
            y64, gx64 = ref_ag(x0, dy)
            return combine(check("y", y, y64, dtype, grad=False),
                           check("dx vs float64 formula on y", dx, ref_bwd(y, dy), dtype, base=torch_bwd(y, dy),
                                 scale=scale_of(y.double(), dy), nat=(y, dy, -1)),
                           check("dx vs float64 autograd of x", dx, gx64, dtype, base=torch_ag(x0, dy)[1],
                                 scale=scale_of(y64, dy), nat=(y64, dy, -1)))
        add(f"{mode} forward, then softmax_backward {DN[dtype]} {shape[0]}x{shape[1]}", fn)
    no_grad_then_backward(f32, (3, 151936), "no_grad")
    no_grad_then_backward(bf16, (1000, 32000), "no_grad")
    no_grad_then_backward(bf16, (3, 65536), "inference_mode")

    # 10. masks, double backward, errors
    def mask_case(dtype, rows, n, kind):
        def fn():
            x0 = rnd((rows, n), dtype)
            g = rnd((rows, n), dtype, 1.0)
            x = x0.clone().requires_grad_()
            if kind.startswith("float"):
                mshape = (1, n) if "(1,n)" in kind else (rows, n)
                m0 = rnd(mshape, dtype, 1.0)
                m0[torch.rand(mshape, device=dev()) < 0.125] = -INF
                m = m0.clone().requires_grad_()
                y = S(x, -1, mask=m)
                (y * g).sum().backward()
                x64, m64 = x0.double().requires_grad_(), m0.double().requires_grad_()
                y64 = torch.softmax(x64 + m64, -1)
                (y64 * g.double()).sum().backward()
                xt, mt = x0.clone().requires_grad_(), m0.clone().requires_grad_()
                yt = torch.softmax(xt + mt, -1)
                (yt * g).sum().backward()
                sc = scale_of(y64.detach(), g)
                return combine(check("y", y, y64.detach(), dtype, grad=False, base=yt.detach()),
                               check("x.grad", x.grad, x64.grad, dtype, base=xt.grad, scale=sc),
                               check("mask.grad", m.grad, m64.grad, dtype, base=mt.grad, scale=sc))
            mask = torch.rand((rows, n), device=dev()) < 0.7
            mask[1] = False  # a fully masked row: zeros and zero gradients (aten._safe_softmax)
            y = S(x, -1, mask=mask)
            (y * g).sum().backward()
            full = ~mask.any(-1, keepdim=True)
            x64 = x0.double().requires_grad_()
            y64 = torch.where(full, 0.0, torch.softmax(x64.masked_fill(~mask, -INF), -1))
            (y64 * g.double()).sum().backward()
            return combine(check("y", y, y64.detach(), dtype, grad=False),
                           check("x.grad", x.grad, x64.grad.nan_to_num(0.0), dtype, scale=scale_of(y64.detach(), g)))
        add(f"mask= {kind} {DN[dtype]} {rows}x{n}", fn)
    mask_case(bf16, 3, 65536, "float (1,n), grad to the mask")
    mask_case(f32, 3, 16388, "float (rows,n), grad to the mask")
    mask_case(bf16, 3, 65536, "bool with a fully masked row")

    def gradgrad(dtype, shape):
        def fn():
            x0 = rnd(shape, dtype)
            g0 = rnd(shape, dtype, 1.0)
            h = rnd(shape, dtype, 1.0)

            def run(x0, g0, h, sm):
                x = x0.clone().requires_grad_()
                g = g0.clone().requires_grad_()
                y = sm(x)
                gx, = torch.autograd.grad((y * g).sum(), x, create_graph=True)
                ggx, ggg = torch.autograd.grad((gx * h).sum(), (x, g))
                return gx.detach(), ggx, ggg
            gx, ggx, ggg = run(x0, g0, h, lambda x: S(x))
            gx64, ggx64, ggg64 = run(x0.double(), g0.double(), h.double(), lambda x: torch.softmax(x, -1))
            gxt, ggxt, gggt = run(x0, g0, h, lambda x: torch.softmax(x, -1))
            y64 = torch.softmax(x0.double(), -1)
            return combine(check("grad", gx, gx64, dtype, base=gxt, scale=scale_of(y64, g0), nat=(y64, g0, -1)),
                           check("gradgrad x", ggx, ggx64, dtype, base=ggxt, scale=scale_of(y64, h)),
                           check("gradgrad g", ggg, ggg64, dtype, base=gggt, scale=scale_of(y64, h)))
        add(f"double backward {DN[dtype]} {shape[0]}x{shape[1]}", fn)
    gradgrad(bf16, (3, 65536))
    gradgrad(f32, (3, 128256))

    def errors():
        y = S(rnd((3, 65536), bf16))
        tries = [  # (what, dy, dim, may work: then it must be right)
            ("dy fp32, y bf16", rnd((3, 65536), f32, 1.0), -1, True),
            ("dy fp16, y bf16 (same element size)", rnd((3, 65536), f16, 1.0), -1, True),
            ("dy 3x65544, y 3x65536", rnd((3, 65544), bf16, 1.0), -1, False),
            ("dy 3x65536x1, y 3x65536", rnd((3, 65536, 1), bf16, 1.0), -1, False),
            ("dy on the CPU", torch.randn(3, 65536).to(bf16), -1, False) if on_gpu() else None,
            ("dim=2 on a 2-D y", rnd((3, 65536), bf16, 1.0), 2, False),
            ("dim=-3 on a 2-D y", rnd((3, 65536), bf16, 1.0), -3, False),
        ]
        res = []
        for what, dy, dim, may_work in filter(None, tries):
            try:
                out = B(y, dy, dim)
                sync()
                if may_work:
                    ok, det = check(f"[{what}] no error; result", out, ref_bwd(y, dy), bf16,
                                    scale=scale_of(y.double(), dy), nat=(y, dy, -1))
                    res.append((ok, det))
                else:
                    res.append((False, f"[{what}] no error, gave {tuple(out.shape)} {out.dtype}"))
            except Exception as e:
                sync()
                bad = type(e).__name__ == "AcceleratorError" or any(
                    w in str(e) for w in ("CUDA error", "illegal memory", "misaligned address"))
                res.append((not bad, f"[{what}] {type(e).__name__}: {str(e).splitlines()[0][:150]}"))
        # and torch, for the first one
        try:
            torch._softmax_backward_data(rnd((3, 65536), f32, 1.0), y, -1, bf16)
            res.append((True, "(torch accepts fp32 dy with bf16 y)"))
        except Exception as e:
            res.append((True, f"(torch: {type(e).__name__}: {str(e).splitlines()[0][:100]})"))
        dy = rnd((3, 65536), bf16, 1.0)
        res.append(check("a good call after the errors", B(y, dy), ref_bwd(y, dy), bf16,
                         scale=scale_of(y.double(), dy), nat=(y, dy, -1)))
        return combine(*res)
    add("errors: unlike y/dy (dtype, shape, device, dim) refused clearly", errors)

    # 11. LM vocabulary widths (after the borders: most are well inside the range)
    for n in (32000, 50257, 65536, 128256, 151936):
        for dtype in (bf16, f16, f32):
            ag(dtype, 3, n)
    for n in (32000, 50257, 128256, 151936):
        ag(bf16, 1000, n)
    ag(f32, 1000, 151936)
    ag(f16, 1000, 65536)
    ag(bf16, 1, 50257)
    ag(f32, 1, 128256)

    # 12. a stress: many rows, several repetitions (races between programs)
    def stress(dtype, rows, n, reps):
        def fn():
            res = []
            for k in range(reps):
                y, dy = yd(dtype, rows, n)()
                poison_pool((rows, n), dtype, k=1)
                dx, t = timed(lambda y=y, dy=dy: B(y, dy))
                res.append(check_chunked(f"rep{k + 1} ({t * 1e3:.2f}ms)", dx, y, dy, dtype))
            return combine(*res)
        add(f"stress {DN[dtype]} {rows}x{n} x{reps}", fn, "gpu")
    stress(bf16, 8192, 65536, 3)
    stress(f32, 4096, 163840, 2)
    stress(f16, 16384, 16384, 3)
    stress(bf16, 2048, 262144, 2)

    return cases, ctx


def setup_impl(ctx, opts):
    """Fill ctx with the functions under test (softmax_lab, or torch with --fake) and the device."""
    import torch

    if opts["cpu"] or not torch.cuda.is_available():
        ctx["dev"], ctx["gpu"] = "cpu", False
    if opts["fake"]:
        def S(x, dim=-1, dtype=None, mask=None):
            if mask is None:
                return torch.softmax(x, dim, dtype=dtype)
            s = x if dtype is None else x.to(dtype)
            s = s.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else s + mask
            return torch.ops.aten._safe_softmax(s, dim)

        def B(y, dy, dim=-1):
            if y.dtype != dy.dtype or y.shape != dy.shape or y.device != dy.device:
                raise ValueError("fake: unlike y/dy")
            return torch._softmax_backward_data(dy, y, dim, y.dtype)
        raw_S, raw_B = torch.softmax, B
    else:
        import softmax_lab
        import softmax_lab.op

        def S(x, dim=-1, dtype=None, mask=None):
            if mask is None and dtype is None:
                return softmax_lab.softmax(x, dim)
            if mask is None:
                return softmax_lab.softmax(x, dim, dtype=dtype)
            return softmax_lab.softmax(x, dim, dtype=dtype, mask=mask)

        B = softmax_lab.op.softmax_backward  # the same function as softmax_lab.softmax_backward
        raw_S, raw_B = softmax_lab.softmax, softmax_lab.op.softmax_backward
    ctx["S"], ctx["B"], ctx["raw_S"], ctx["raw_B"] = S, B, raw_S, raw_B


# ------------------------------------------------------------------------------------------------ child
def child(opts):
    import torch

    T0 = float(os.environ.get("TRIAL_T0", time.time()))
    start = opts["child"]
    cases, ctx = build(opts)
    setup_impl(ctx, opts)
    print(f"@@TOTAL {len(cases)}", flush=True)
    for i, (name, _, _) in enumerate(cases):
        print(f"@@NAME {i} {name}", flush=True)
    if start == 0:
        import triton
        if ctx["gpu"]:
            where = f"{torch.cuda.get_device_name()} cap {torch.cuda.get_device_capability()}"
        else:
            where = "CPU (Triton interpreter)" if not opts["fake"] else "CPU"
        print(f"== torch {torch.__version__} triton {triton.__version__} on {where}; {len(cases)} cases"
              f"{' FAKE (torch itself under test)' if opts['fake'] else ''}; budget {BUDGET_S:.0f}s", flush=True)

    def skip(i, case):
        name, _, tags = case
        if opts["only"] is not None and not re.search(opts["only"], name):
            return ""
        return "needs a GPU" if not ctx["gpu"] and tags & {"gpu", "huge"} else None

    run_cases(cases, start, T0, BUDGET_S, ctx["gpu"], skip)


def list_cases(opts):
    cases, _ = build(opts)
    import softmax_lab  # noqa: F401 - the package imports (it does not touch a GPU here)
    shown = 0
    for i, (name, _, tags) in enumerate(cases):
        if opts["only"] is not None and not re.search(opts["only"], name):
            continue
        shown += 1
        print(f"#{i:3d} {name}" + (f"  [{', '.join(sorted(tags))}]" if tags else ""))
    print(f"{shown} cases" + (f" of {len(cases)}" if shown != len(cases) else ""))


if __name__ == "__main__":
    o = parse_args(sys.argv[1:])
    if o["child"] is not None:
        child(o)
    elif o["list"]:
        list_cases(o)
    else:
        sys.exit(driver(o))
