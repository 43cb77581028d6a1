"""The clustered forward with each cluster working through many rows, the next row's slices copied in while this
row's cluster waits at its barrier and stores, beside the library's kernel (``kernels/clustered.py``: a cluster a
row) on the widths where it stops 8-9 points under QuACK (docs/performance.md, rounds 8, 10 and 11). GPU machine
(sm_90), repository root, QuACK importable for its lines (``benchmarks/bench_with_peers.sh`` shows how):

    PYTHONPATH=code python3 benchmarks/sweeps/clustered_persistent.py OUT.json

Round 8 found where the clustered kernel's time goes: each program's copies have all landed, and none is in
flight, while the cluster waits at its barrier for its slowest program and then stores. ``persistent_kernel``
keeps a second buffer: as many clusters as the GPU holds at once (``cuOccupancyMaxActiveClusters``), each taking
rows ``c, c + clusters, ...``; before a row's max and sum, the program issues the copies of its next row into the
other buffer, so they are in flight through the barrier and the store pass. The max and sum are taken as the
chunks land (``chunk_state``), the partials go through global memory (a slot per row), the store pass reads shared
memory once more. Every setting is checked against float64 on hard rows first, then timed with ``bench.compare``.
"""
import sys

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy as cp

from softmax_lab import bench
from softmax_lab.kernels import chunk_state
from softmax_lab.kernels._launch import cdiv
from softmax_lab.kernels.clustered import (cluster_barrier, shared_layout, slices, split_layout,
                                           whole_cluster_layout)


@gluon.jit
def _copy_row(row_smem, first, src, cols, limit, N: gl.constexpr, CHUNK: gl.constexpr):
    for c in gl.static_range(N):  # a commit group per chunk (all masked off past the last row: still a group)
        cp.async_copy_global_to_shared(row_smem.index(first + c), src + c * CHUNK + cols, mask=c * CHUNK + cols < limit)
        cp.commit_group()


@gluon.jit
def persistent_kernel(out_ptr, in_ptr, partial_ptr, n_rows, n_cols, n_cols_v, in_stride_v, out_stride_v,
                      SLICE: gl.constexpr, CHUNK: gl.constexpr, PARTS: gl.constexpr):
    VEC: gl.constexpr = 128 // in_ptr.dtype.element_ty.primitive_bitwidth
    N: gl.constexpr = SLICE // CHUNK
    layout: gl.constexpr = split_layout(VEC, gl.num_warps(), PARTS)
    smem = gl.allocate_shared_memory(in_ptr.dtype.element_ty, [2 * N, PARTS, CHUNK], shared_layout(PARTS))
    part = gl.arange(0, PARTS, layout=gl.SliceLayout(1, layout))
    cols = part[:, None] * SLICE + gl.arange(0, CHUNK, layout=gl.SliceLayout(0, layout))[None, :]
    every = gl.arange(0, PARTS, layout=whole_cluster_layout(gl.num_warps(), PARTS))
    step = gl.num_programs(0)
    first = gl.program_id(0)
    _copy_row(smem, 0, in_ptr + first.to(gl.int64) * (in_stride_v * VEC), cols,
              gl.where(first < n_rows, n_cols_v * VEC, 0), N, CHUNK)
    i = 0
    for r in range(first, n_rows, step):
        row = r.to(gl.int64)
        here = (i % 2) * N
        nxt = r + step  # 1. the next row on its way into the other buffer
        _copy_row(smem, N - here, in_ptr + nxt.to(gl.int64) * (in_stride_v * VEC), cols,
                  gl.where(nxt < n_rows, n_cols_v * VEC, 0), N, CHUNK)
        m_t, l_t = chunk_state.start_parts(PARTS, CHUNK, VEC)
        for c in gl.static_range(N):  # 2. this row's max and sum as its chunks land
            cp.wait_group(2 * N - 1 - c)
            x = smem.index(here + c).load(layout).to(gl.float32)
            x = gl.where(c * CHUNK + cols < n_cols, x, float("-inf"))
            m_t, l_t = chunk_state.fold_parts(m_t, l_t, x, VEC)
        m_part, l_part = chunk_state.finish_parts(m_t, l_t, gl.SliceLayout(1, layout))
        mine = partial_ptr + row * (2 * PARTS) + part * 2  # 3. the partials out, the barrier, all of them in
        gl.store(mine, m_part)
        gl.store(mine + 1, l_part)
        cluster_barrier()
        theirs = partial_ptr + row * (2 * PARTS) + every * 2
        m_all = gl.load(theirs, volatile=True)
        l_all = gl.load(theirs + 1, volatile=True)
        m_row = gl.max(m_all, axis=0)
        scale = 1.0 / gl.sum(l_all * gl.exp2(m_all - m_row), axis=0)
        dst = out_ptr + row * (out_stride_v * VEC)
        for c in range(N):  # 4. exp again, scaled, stored
            x = smem.index(here + c).load(layout).to(gl.float32)
            y = gl.exp2(x * 1.4426950408889634 - m_row) * scale
            gl.store(dst + c * CHUNK + cols, y.to(out_ptr.dtype.element_ty), mask=c * CHUNK + cols < n_cols_v * VEC)
        i += 1
    cp.wait_group(0)


_CLUSTERS = {}


def persistent_softmax(x, out=None, parts=4, num_warps=4, vectors=None, waves=1):
    """Softmax over the last dim of a contiguous 2-D CUDA ``x`` whose rows are whole 16-byte vectors."""
    from triton.runtime import driver

    assert x.is_cuda and x.dim() == 2 and x.stride(1) == 1 and (x.shape[1] * x.element_size()) % 16 == 0
    y = torch.empty_like(x) if out is None else out
    n_rows, n_cols = x.shape
    vec = 16 // x.element_size()
    options = slices(n_cols, x.element_size(), parts, num_warps, vectors)
    partials = torch.empty(n_rows * 2 * options["PARTS"], dtype=torch.float32, device=x.device)
    key = (x.dtype, n_cols, parts, num_warps, vectors)
    args = (y, x, partials, n_rows, n_cols, n_cols // vec, x.stride(0) // vec, y.stride(0) // vec)
    if key not in _CLUSTERS:
        compiled = persistent_kernel.warmup(*args, grid=(1,), **options)
        compiled._init_handles()
        _CLUSTERS[key] = driver.active.utils.cuOccupancyMaxActiveClusters(compiled.function, compiled.metadata.shared,
                                                                          options["PARTS"])
    grid = (max(1, min(n_rows, waves * _CLUSTERS[key])),)
    persistent_kernel[grid](*args, **options)
    return y


def hard_rows(n_rows, n_cols, dtype):
    """Rows to check first: random, all -inf, -inf runs, near -1000 with the mass on a few."""
    x = 3 * torch.randn((n_rows, n_cols), device="cuda")
    x[1] = float("-inf")
    x[2, : n_cols // 2] = float("-inf")
    x[3] = -1000.0 - 3 * torch.rand(n_cols, device="cuda")
    x[3, :: n_cols // 5] = -990.0
    return x.to(dtype)


def checked(launch, n_cols, dtype):
    """Whether ``launch`` gives float64's softmax on ``hard_rows`` (NaN where torch gives NaN), with more rows
    than clusters (each cluster takes several) and with fewer."""
    for n_rows in (1000, 7):
        x = hard_rows(n_rows, n_cols, dtype)
        y = launch(x, torch.full_like(x, float("nan")))
        tol = 1e-5 if dtype == torch.float32 else 1e-2
        ref = torch.softmax(x.double(), -1)
        if not torch.allclose(y.double(), ref, atol=tol * 0.1, rtol=tol, equal_nan=True):
            return False
    return True


# (rows, columns, dtype): the settings (parts, num_warps, vectors, waves) to try.
SETTINGS = {(1024, 65536, torch.bfloat16): [(4, 4, 2, 1), (4, 4, 1, 1), (4, 8, 1, 1), (8, 4, 1, 1), (4, 4, 2, 2)],
            (1024, 128256, torch.bfloat16): [(8, 2, None, 1), (8, 4, None, 1), (8, 4, None, 2), (16, 4, None, 1)],
            (1024, 100000, torch.bfloat16): [(8, 2, None, 1), (8, 4, None, 1)],
            (512, 151936, torch.float32): [(16, 4, None, 1), (16, 2, None, 1), (8, 8, None, 1)],
            (1024, 65536, torch.float32): [(8, 2, 2, 1), (8, 4, None, 1)]}


def main(path):
    quack = bench.peer_candidates()
    cases = []
    for (n_rows, n_cols, dtype), settings in SETTINGS.items():
        candidates = list(quack)
        for parts, warps, vectors, waves in settings:
            def launch(x, out, parts=parts, warps=warps, vectors=vectors, waves=waves):
                return persistent_softmax(x, out, parts, warps, vectors, waves)
            name = f"persistent {parts}x{warps}x{vectors}w{waves}"
            try:
                right = checked(launch, n_cols, dtype)
            except Exception as error:  # (e.g. a cluster of 16 this GPU will not launch)
                print(f"{n_rows}x{n_cols} {dtype} {name}: {type(error).__name__}: {error}"[:400], flush=True)
                continue
            if not right:
                print(f"{n_rows}x{n_cols} {dtype} {name}: WRONG on the hard rows", flush=True)
                continue
            candidates.append((name, launch, dict(parts=parts, num_warps=warps, vectors=vectors, waves=waves)))
        cases.append((n_rows, n_cols, dtype, candidates))
    bench.sweep(path, cases, "PYTHONPATH=code python3 benchmarks/sweeps/clustered_persistent.py OUT.json")


if __name__ == "__main__":
    main(sys.argv[1])
