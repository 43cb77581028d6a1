"""Probe (issue 15, sixth session): the clustered kernel made persistent, with two slice buffers per program, so
the next row's copy is in flight while this row is reduced, exchanged at the cluster barrier and stored.
``ring_softmax(x, parts, num_warps, vectors, ctas_per_sm)``; GPU (Hopper) only."""
import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy as cp

from softmax_lab.kernels._launch import cdiv, num_sms
from softmax_lab.kernels.clustered import (cluster_barrier, shared_layout, slices, split_layout,
                                           whole_cluster_layout)


@gluon.jit
def ring_kernel(out_ptr, in_ptr, partial_ptr, n_rows, n_cols, n_cols_v, in_stride_v, out_row_stride,
                SLICE: gl.constexpr, CHUNK: gl.constexpr, PARTS: gl.constexpr):
    VEC: gl.constexpr = 128 // in_ptr.dtype.element_ty.primitive_bitwidth
    LOG2E: gl.constexpr = 1.4426950408889634
    N: gl.constexpr = SLICE // CHUNK
    layout: gl.constexpr = split_layout(VEC, gl.num_warps(), PARTS)
    smem = gl.allocate_shared_memory(in_ptr.dtype.element_ty, [2 * N, PARTS, CHUNK], shared_layout(PARTS))
    part = gl.arange(0, PARTS, layout=gl.SliceLayout(1, layout))
    cols = part[:, None] * SLICE + gl.arange(0, CHUNK, layout=gl.SliceLayout(0, layout))[None, :]
    every = gl.arange(0, PARTS, layout=whole_cluster_layout(gl.num_warps(), PARTS))
    first = gl.program_id(0)
    step = gl.num_programs(0)
    src = in_ptr + first.to(gl.int64) * (in_stride_v * VEC)
    for c in range(N):  # the first row's copy
        cp.async_copy_global_to_shared(smem.index(c), src + c * CHUNK + cols, mask=c * CHUNK + cols < n_cols_v * VEC)
    cp.commit_group()
    i = 0
    for row32 in range(first, n_rows, step):
        row = row32.to(gl.int64)
        nxt = row + step
        buf = (i % 2) * N
        other = N - buf
        src = in_ptr + nxt * (in_stride_v * VEC)
        for c in range(N):  # the next row's copy (masked off past the last row) into the other buffer
            cp.async_copy_global_to_shared(smem.index(other + c), src + c * CHUNK + cols,
                                           mask=(c * CHUNK + cols < n_cols_v * VEC) & (nxt < n_rows))
        cp.commit_group()
        cp.wait_group(1)  # this row's copy has landed (this thread's part: it reads only what it copied)
        m = gl.full([PARTS, CHUNK], float("-inf"), gl.float32, layout)
        for c in range(N):
            x = smem.index(buf + c).load(layout).to(gl.float32)
            m = gl.maximum(m, gl.where(c * CHUNK + cols < n_cols, x, float("-inf")))
        m_part = gl.max(m, axis=1)
        shift = gl.where(m_part == float("-inf"), 0.0, m_part) * LOG2E
        total = gl.zeros([PARTS, CHUNK], gl.float32, layout)
        for c in range(N):
            x = smem.index(buf + c).load(layout).to(gl.float32)
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
        dst = out_ptr + row * out_row_stride
        for c in range(N):
            x = smem.index(buf + c).load(layout).to(gl.float32)
            y = gl.exp2(x * LOG2E - m_row * LOG2E) * scale
            gl.store(dst + c * CHUNK + cols, y.to(out_ptr.dtype.element_ty), mask=c * CHUNK + cols < n_cols)
        i += 1
    cp.wait_group(0)


def ring_softmax(x, out=None, parts=None, num_warps=None, vectors=None, ctas_per_sm=2):
    y = torch.empty_like(x) if out is None else out
    n_rows, n_cols = x.shape
    vec = 16 // x.element_size()
    o = slices(n_cols, x.element_size(), parts, num_warps, vectors)
    grid = max(1, min(n_rows, num_sms(x.device) * ctas_per_sm // o["PARTS"]))
    partials = torch.empty(n_rows * 2 * o["PARTS"], dtype=torch.float32, device=x.device)
    ring_kernel[(grid,)](y, x, partials, n_rows, n_cols, cdiv(n_cols, vec), x.stride(0) // vec, y.stride(0), **o)
    return y
