"""Two variants of the clustered kernel (``kernels/clustered.py``) that issue 28's round 6 tried and lost, kept
so that their records can be re-run. GPU machine (sm_90), repository root:

    PYTHONPATH=code python3 benchmarks/sweeps/clustered_variants.py OUT.json persistent   # streamed_softmax
    PYTHONPATH=code python3 benchmarks/sweeps/clustered_variants.py OUT.json keep         # keep_softmax

* ``streamed_softmax``: persistent clusters, as many as the GPU holds at once (``cuOccupancyMaxActiveClusters``),
  each looping over rows; two slices of shared memory per program, the next row's copy started before this row's
  max, so that copies stay in flight through the cluster barrier.
* ``keep_softmax``: ``ftz`` computes exp2 with ``ex2.approx.ftz`` (the bare MUFU instruction) and ``keep`` keeps
  each chunk's exp in registers from the sum pass to the store pass (one exp per element, not two; the slice's
  exps rescaled by exp2(its max - the row's max) at the end).

Each setting that fits is timed beside the dispatcher, torch and a copy (``bench.compare``: buffers past the L2
cache, results checked against float64 before and after), after an edge check (an all -inf row, half -inf rows,
rows far below 0) against float64. Records: ``benchmarks/records/h200-clustered-persistent-round6.json`` and
``h200-clustered-keep-round6.json``; what they showed: docs/performance.md, "Issue 28, round 6".
"""
import sys

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy as cp

from softmax_lab import bench
from softmax_lab.kernels._launch import cdiv, row_vector
from softmax_lab.kernels.clustered import cluster_barrier, shared_layout, slices, split_layout, whole_cluster_layout

F32, BF16 = torch.float32, torch.bfloat16
SHARED_BYTES = 227 * 1024
LOG2E = gl.constexpr(1.4426950408889634)  # (a global a kernel reads must be a constexpr)


@gluon.jit
def _issue(row_smem, buf, src, cols, limit, ok, N: gl.constexpr, CHUNK: gl.constexpr):
    """One row's slice on its way into buffer ``buf`` (nothing where not ``ok``), a commit group per chunk."""
    for c in gl.static_range(N):
        cp.async_copy_global_to_shared(row_smem.index(buf * N + c), src + c * CHUNK + cols,
                                       mask=(c * CHUNK + cols < limit) & ok)
        cp.commit_group()


@gluon.jit
def streamed_kernel(out_ptr, in_ptr, partial_ptr, n_rows, n_cols, n_cols_v, in_stride_v, out_stride_v,
                    SLICE: gl.constexpr, CHUNK: gl.constexpr, PARTS: gl.constexpr, OUT_VEC: gl.constexpr = 1):
    VEC: gl.constexpr = 128 // in_ptr.dtype.element_ty.primitive_bitwidth
    N: gl.constexpr = SLICE // CHUNK
    layout: gl.constexpr = split_layout(VEC, gl.num_warps(), PARTS)
    row_smem = gl.allocate_shared_memory(in_ptr.dtype.element_ty, [2 * N, PARTS, CHUNK], shared_layout(PARTS))
    first, step = gl.program_id(0), gl.num_programs(0)
    part = gl.arange(0, PARTS, layout=gl.SliceLayout(1, layout))
    cols = part[:, None] * SLICE + gl.arange(0, CHUNK, layout=gl.SliceLayout(0, layout))[None, :]
    limit = n_cols_v * VEC
    every = gl.arange(0, PARTS, layout=whole_cluster_layout(gl.num_warps(), PARTS))
    _issue(row_smem, 0, in_ptr + first.to(gl.int64) * (in_stride_v * VEC), cols, limit, first < n_rows, N, CHUNK)
    b = 0
    for r in range(first, n_rows, step):
        row = r.to(gl.int64)
        gl.thread_barrier()  # the other buffer's last reads (the previous row's stores) are done
        nxt = row + step
        _issue(row_smem, 1 - b, in_ptr + nxt * (in_stride_v * VEC), cols, limit, nxt < n_rows, N, CHUNK)
        m = gl.full([PARTS, CHUNK], float("-inf"), gl.float32, layout)
        for c in gl.static_range(N):
            cp.wait_group(2 * N - 1 - c)  # (the next row's N groups are younger)
            x = row_smem.index(b * N + c).load(layout).to(gl.float32)
            m = gl.maximum(m, gl.where(c * CHUNK + cols < n_cols, x, float("-inf")))
        m_part = gl.max(m, axis=1)
        shift = gl.where(m_part == float("-inf"), 0.0, m_part) * LOG2E
        total = gl.zeros([PARTS, CHUNK], gl.float32, layout)
        for c in range(N):
            x = row_smem.index(b * N + c).load(layout).to(gl.float32)
            total += gl.where(c * CHUNK + cols < n_cols, gl.exp2(x * LOG2E - shift[:, None]), 0.0)
        mine = partial_ptr + row * (2 * PARTS) + part * 2
        gl.store(mine, m_part)
        gl.store(mine + 1, gl.sum(total, axis=1))
        cluster_barrier()
        theirs = partial_ptr + row * (2 * PARTS) + every * 2
        m_all = gl.load(theirs, volatile=True)
        l_all = gl.load(theirs + 1, volatile=True)
        m_row = gl.max(m_all, axis=0)
        scale = 1.0 / gl.sum(l_all * gl.exp2((m_all - m_row) * LOG2E), axis=0)
        dst = out_ptr + row * (out_stride_v * OUT_VEC)
        end = n_cols_v * VEC if OUT_VEC == VEC else n_cols
        for c in range(N):
            x = row_smem.index(b * N + c).load(layout).to(gl.float32)
            y = gl.exp2(x * LOG2E - m_row * LOG2E) * scale
            gl.store(dst + c * CHUNK + cols, y.to(out_ptr.dtype.element_ty), mask=c * CHUNK + cols < end)
        b = 1 - b
    cp.wait_group(0)


def _setup(x, out, parts, num_warps, vectors):
    """The output, the launch's constexprs, and the args after the row count: as ``clustered.launch_setup``."""
    n_rows, n_cols = x.shape
    y = torch.empty_like(x) if out is None else out
    vec = 16 // x.element_size()
    o = slices(n_cols, x.element_size(), parts, num_warps, vectors)
    o["OUT_VEC"] = out_vec = row_vector(n_cols, y)
    partials = torch.empty(n_rows * 2 * o["PARTS"], dtype=torch.float32, device=x.device)
    return y, o, (n_cols, cdiv(n_cols, vec), x.stride(0) // vec, y.stride(0) // out_vec), partials


_ACTIVE = {}


def streamed_softmax(x, out=None, parts=None, num_warps=None, vectors=None):
    """The persistent variant: a grid of as many clusters as the GPU holds at once."""
    from triton.runtime import driver

    y, o, rest, partials = _setup(x, out, parts, num_warps, vectors)
    args = (y, x, partials, x.shape[0], *rest)
    key = (x.shape[1], x.dtype, tuple(sorted(o.items())))
    if key not in _ACTIVE:
        compiled = streamed_kernel.warmup(*args, grid=(1,), **o)
        compiled._init_handles()
        _ACTIVE[key] = driver.active.utils.cuOccupancyMaxActiveClusters(compiled.function, compiled.metadata.shared,
                                                                        o["PARTS"])
    streamed_kernel[(max(1, min(x.shape[0], _ACTIVE[key])),)](*args, **o)
    return y


@gluon.jit
def exp2_(z, FTZ: gl.constexpr):
    if FTZ:
        return gl.inline_asm_elementwise("ex2.approx.ftz.f32 $0, $1;", "=f,f", [z], dtype=gl.float32,
                                         is_pure=True, pack=1)
    else:
        return gl.exp2(z)


@gluon.jit
def keep_kernel(out_ptr, in_ptr, partial_ptr, n_cols, n_cols_v, in_stride_v, out_stride_v,
                SLICE: gl.constexpr, CHUNK: gl.constexpr, PARTS: gl.constexpr, OUT_VEC: gl.constexpr,
                FTZ: gl.constexpr, KEEP: gl.constexpr):
    VEC: gl.constexpr = 128 // in_ptr.dtype.element_ty.primitive_bitwidth
    N: gl.constexpr = SLICE // CHUNK
    layout: gl.constexpr = split_layout(VEC, gl.num_warps(), PARTS)
    row_smem = gl.allocate_shared_memory(in_ptr.dtype.element_ty, [N, PARTS, CHUNK], shared_layout(PARTS))
    row = gl.program_id(0).to(gl.int64)
    part = gl.arange(0, PARTS, layout=gl.SliceLayout(1, layout))
    cols = part[:, None] * SLICE + gl.arange(0, CHUNK, layout=gl.SliceLayout(0, layout))[None, :]
    src = in_ptr + row * (in_stride_v * VEC)
    for c in gl.static_range(N):
        cp.async_copy_global_to_shared(row_smem.index(c), src + c * CHUNK + cols,
                                       mask=c * CHUNK + cols < n_cols_v * VEC)
        cp.commit_group()
    m = gl.full([PARTS, CHUNK], float("-inf"), gl.float32, layout)
    for c in gl.static_range(N):
        cp.wait_group(N - 1 - c)
        x = row_smem.index(c).load(layout).to(gl.float32)
        m = gl.maximum(m, gl.where(c * CHUNK + cols < n_cols, x, float("-inf")))
    m_part = gl.max(m, axis=1)
    shift = gl.where(m_part == float("-inf"), 0.0, m_part) * LOG2E
    total = gl.zeros([PARTS, CHUNK], gl.float32, layout)
    es = ()
    for c in gl.static_range(N):
        x = row_smem.index(c).load(layout).to(gl.float32)
        e = gl.where(c * CHUNK + cols < n_cols, exp2_(x * LOG2E - shift[:, None], FTZ), 0.0)
        total += e
        if KEEP:
            es = es + (e,)
    mine = partial_ptr + row * (2 * PARTS) + part * 2
    gl.store(mine, m_part)
    gl.store(mine + 1, gl.sum(total, axis=1))
    cluster_barrier()
    every = gl.arange(0, PARTS, layout=whole_cluster_layout(gl.num_warps(), PARTS))
    theirs = partial_ptr + row * (2 * PARTS) + every * 2
    m_all = gl.load(theirs, volatile=True)
    l_all = gl.load(theirs + 1, volatile=True)
    m_row = gl.max(m_all, axis=0)
    scale = 1.0 / gl.sum(l_all * exp2_((m_all - m_row) * LOG2E, FTZ), axis=0)
    dst = out_ptr + row * (out_stride_v * OUT_VEC)
    end = n_cols_v * VEC if OUT_VEC == VEC else n_cols
    if KEEP:
        factor = exp2_(shift - m_row * LOG2E, FTZ) * scale  # this slice's exps, rescaled to the row's max
        for c in gl.static_range(N):
            y = es[c] * factor[:, None]
            gl.store(dst + c * CHUNK + cols, y.to(out_ptr.dtype.element_ty), mask=c * CHUNK + cols < end)
    else:
        for c in range(N):
            x = row_smem.index(c).load(layout).to(gl.float32)
            y = exp2_(x * LOG2E - m_row * LOG2E, FTZ) * scale
            gl.store(dst + c * CHUNK + cols, y.to(out_ptr.dtype.element_ty), mask=c * CHUNK + cols < end)


def keep_softmax(x, out=None, parts=None, num_warps=None, vectors=None, ftz=True, keep=True):
    y, o, rest, partials = _setup(x, out, parts, num_warps, vectors)
    keep_kernel[(x.shape[0],)](y, x, partials, *rest, FTZ=ftz, KEEP=keep, **o)
    return y


def edge_check(fn, cases):
    """An all -inf row (NaN, as torch), a half -inf row, a row far below 0, against float64; the failures."""
    bad = []
    for rows, cols, dtype, knobs in cases:
        x = torch.randn(rows, cols, device="cuda", dtype=dtype) * 5
        x[0], x[1, : cols // 2], x[-1] = float("-inf"), float("-inf"), -1000 - x[-1].abs()
        y = fn(x, out=torch.full_like(x, float("nan")), **knobs)
        ref = torch.softmax(x.double(), -1)
        err = (y[1:].double() - ref[1:]).abs().max().item()
        ok = err < 1e-2 and bool(y[0].isnan().all()) and not bool(y[1:].isnan().any())
        print("edge", rows, cols, dtype, knobs, "max error", err, "ok" if ok else "FAILED", flush=True)
        if not ok:
            bad.append((rows, cols, str(dtype), knobs))
    return bad


EDGES = [(3, 128256, BF16, dict(parts=8, num_warps=8)), (5, 65536, F32, dict(parts=8, num_warps=4)),
         (300, 100000, BF16, dict(parts=8, num_warps=4)), (700, 151936, F32, dict(parts=16, num_warps=8))]
SHAPES = [(1024, 128256, BF16), (1024, 65536, BF16), (512, 151936, F32), (2048, 128256, BF16), (1024, 65536, F32),
          (1024, 128256, F32), (4096, 98304, BF16)]


def candidates(which, n_cols, dtype):
    out = []
    if which == "persistent":
        for p in (4, 8, 16):
            for w in (4, 8):
                for v in (1, 2):
                    try:
                        s = slices(n_cols, dtype.itemsize, p, w, v)["SLICE"] * dtype.itemsize
                    except ValueError:
                        continue
                    if (12 << 10) <= s <= (80 << 10) and 2 * s <= SHARED_BYTES:
                        k = dict(parts=p, num_warps=w, vectors=v)
                        out.append(("streamed", lambda x, out, k=k: streamed_softmax(x, out=out, **k), k))
        return out
    for p, w in [(4, 4), (4, 8), (8, 2), (8, 4), (8, 8), (16, 4), (16, 8)]:
        try:
            s = slices(n_cols, dtype.itemsize, p, w, 1)
        except ValueError:
            continue
        if s["SLICE"] * dtype.itemsize > SHARED_BYTES:
            continue
        for ftz, keep in ((True, True), (True, False), (False, True)):
            if not keep or s["SLICE"] // (32 * w) <= 128:  # (kept exps: at most 128 registers a thread)
                k = dict(parts=p, num_warps=w, vectors=1, ftz=ftz, keep=keep)
                out.append(("keep", lambda x, out, k=k: keep_softmax(x, out=out, **k), k))
    return out


def main(path, which):
    fn = streamed_softmax if which == "persistent" else keep_softmax
    bad = edge_check(fn, EDGES)
    bench.sweep(path, [(n_rows, n_cols, dtype, candidates(which, n_cols, dtype)) for n_rows, n_cols, dtype in SHAPES],
                "python3 benchmarks/sweeps/clustered_variants.py " + " ".join(sys.argv[1:]), edge_failures=bad)


if __name__ == "__main__":
    main(*sys.argv[1:3])
