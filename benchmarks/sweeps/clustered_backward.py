"""A backward on a cluster of programs: each holds its slice of a row's y and dy in shared memory, the cluster
sums Σ dy·y as ``kernels/clustered.py`` sums the forward's partials, and each writes its slice of dx. The next
step for the backward lines of issue 28 that miss 90% of copy (1024×128256 bf16 at 82.2, 512×151936 fp32 at
88.3: docs/performance.md, round 7), where the row's y and dy do not fit one program's shared memory. GPU machine
(sm_90), repository root:

    PYTHONPATH=code python3 benchmarks/sweeps/clustered_backward.py OUT.json

Rows that start on 16 bytes and are whole 16-byte vectors only (the LM widths above are). Each setting is timed
beside the dispatcher, torch and a copy (``bench.compare``, kind ``backward``: y + dy in, dx out; results checked
against float64 before and after), after an edge check (rows of one-hot y, y of zeros but one, dy of ±1e4).

Not run yet: written when the session's device time was spent. Every setting of the grid compiled for sm_90 on
the CPU (``machine_code.compile_for_h200``, as ``tests/kernels/test_gluon.py`` compiles the library's kernels): no
spills, 16-byte copies in and stores out. No record cites it.
"""
import sys

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy as cp

from softmax_lab import bench
from softmax_lab.kernels._launch import cdiv, next_power_of_2, whole_chunks
from softmax_lab.kernels.clustered import MAX_CHUNKS, cluster_barrier, shared_layout, split_layout, whole_cluster_layout
from softmax_lab.kernels.cluster_exchange import cluster_arrive, exchange_sum


@gluon.jit
def clustered_backward_kernel(dx_ptr, y_ptr, dy_ptr, partial_ptr, n_cols_v, y_stride_v, dy_stride_v, dx_stride_v,
                              SLICE: gl.constexpr, CHUNK: gl.constexpr, PARTS: gl.constexpr, DSMEM: gl.constexpr):
    VEC: gl.constexpr = 128 // y_ptr.dtype.element_ty.primitive_bitwidth
    N: gl.constexpr = SLICE // CHUNK
    layout: gl.constexpr = split_layout(VEC, gl.num_warps(), PARTS)
    y_smem = gl.allocate_shared_memory(y_ptr.dtype.element_ty, [N, PARTS, CHUNK], shared_layout(PARTS))
    dy_smem = gl.allocate_shared_memory(dy_ptr.dtype.element_ty, [N, PARTS, CHUNK], shared_layout(PARTS))
    row = gl.program_id(0).to(gl.int64)  # (the cluster's number)
    part = gl.arange(0, PARTS, layout=gl.SliceLayout(1, layout))
    cols = part[:, None] * SLICE + gl.arange(0, CHUNK, layout=gl.SliceLayout(0, layout))[None, :]
    end = n_cols_v * VEC  # (whole vectors: the row's last element ends one)
    y_src = y_ptr + row * (y_stride_v * VEC)
    dy_src = dy_ptr + row * (dy_stride_v * VEC)
    for c in gl.static_range(N):  # 1. this program's slices of y and dy on their way, a commit group per chunk
        cp.async_copy_global_to_shared(y_smem.index(c), y_src + c * CHUNK + cols, mask=c * CHUNK + cols < end)
        cp.async_copy_global_to_shared(dy_smem.index(c), dy_src + c * CHUNK + cols, mask=c * CHUNK + cols < end)
        cp.commit_group()
    if DSMEM:
        cluster_arrive()
    total = gl.zeros([PARTS, CHUNK], gl.float32, layout)
    for c in gl.static_range(N):  # 2. the slice's Σ dy·y, chunk by chunk as they land
        cp.wait_group(N - 1 - c)
        y = y_smem.index(c).load(layout).to(gl.float32)
        d = dy_smem.index(c).load(layout).to(gl.float32)
        total += gl.where(c * CHUNK + cols < end, y * d, 0.0)
    if DSMEM:  # 3. the partials through the partners' shared memory (cluster_exchange.py)
        s = exchange_sum(gl.sum(total, axis=1), PARTS)[:, None]
    else:  # 3. the partials out, the barrier, everyone's partials in
        mine = partial_ptr + row * PARTS + part
        gl.store(mine, gl.sum(total, axis=1))
        cluster_barrier()
        every = gl.arange(0, PARTS, layout=whole_cluster_layout(gl.num_warps(), PARTS))
        s = gl.sum(gl.load(partial_ptr + row * PARTS + every, volatile=True), axis=0)
    dst = dx_ptr + row * (dx_stride_v * VEC)
    for c in range(N):  # 4. dx = y·(dy - s), from shared memory (dx may be dy or y itself: both are read already)
        y = y_smem.index(c).load(layout).to(gl.float32)
        d = dy_smem.index(c).load(layout).to(gl.float32)
        gl.store(dst + c * CHUNK + cols, (y * (d - s)).to(dx_ptr.dtype.element_ty), mask=c * CHUNK + cols < end)


def slices(n_cols, element_size, parts, num_warps, vectors=None):
    """As ``clustered.slices``, with ``parts`` and ``num_warps`` given: each program's slice of each tensor."""
    vectors = vectors or next_power_of_2(cdiv(cdiv(n_cols, parts), MAX_CHUNKS * 32 * num_warps * 16 // element_size))
    chunk = 32 * num_warps * vectors * 16 // element_size
    chunks = whole_chunks(cdiv(n_cols, parts), chunk)
    if chunks > MAX_CHUNKS:
        raise ValueError(f"{chunks} chunks of {chunk}: more parts, warps or vectors")
    return dict(SLICE=chunks * chunk, CHUNK=chunk, PARTS=parts, num_warps=num_warps, num_ctas=parts)


def clustered_backward(y, dy, out=None, parts=8, num_warps=4, vectors=None, dsmem=False):
    """dx for 2-D y and dy of one dtype, rows on 16 bytes and whole vectors (the sweep's shapes are); ``dsmem``:
    the partials through the partners' shared memory, else through global memory."""
    n_rows, n_cols = y.shape
    vec = 16 // y.element_size()
    dx = torch.empty_like(y) if out is None else out
    if n_cols % vec or any(t.shape != y.shape or t.dtype != y.dtype or t.stride(1) != 1 or t.stride(0) % vec
                           or t.data_ptr() % 16 for t in (y, dy, dx)):
        raise ValueError("clustered_backward (sweep): y, dy, out alike, rows on 16 bytes, whole 16-byte vectors")
    o = slices(n_cols, y.element_size(), parts, num_warps, vectors)
    partials = torch.empty(n_rows * parts, dtype=torch.float32, device=y.device)
    clustered_backward_kernel[(n_rows,)](dx, y, dy, partials, n_cols // vec, y.stride(0) // vec,
                                         dy.stride(0) // vec, dx.stride(0) // vec,
                                         DSMEM=dsmem, **o)
    return dx


def edge_check(cases):
    """One-hot rows of y, a y of zeros but one element, dy of ±1e4, and dx written over dy: against float64."""
    bad = []
    for rows, cols, dtype, knobs in cases:
        y = torch.softmax(torch.randn(rows, cols, device="cuda") * 4, -1).to(dtype)
        y[0] = 0
        y[0, 7] = 1
        dy = (torch.randn(rows, cols, device="cuda") * 1e4).to(dtype)
        want = y.double() * (dy.double() - (y.double() * dy.double()).sum(-1, keepdim=True))
        for in_place in (False, True):  # dx into a poisoned tensor, then over dy itself
            d = dy.clone() if in_place else dy
            got = clustered_backward(y, d, out=d if in_place else torch.full_like(y, float("nan")), **knobs).double()
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
