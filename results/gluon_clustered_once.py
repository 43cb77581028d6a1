"""Probe (issue 15, sixth session): the clustered kernel computing each exp once. Its sum pass also keeps
exp(x - slice max) in a float32 buffer in shared memory, and the store pass scales those (one multiply per
element instead of an exp and a conversion), at the price of three times the shared memory for 16-bit rows.
``once_softmax(x, out, parts, num_warps, vectors)``; GPU (Hopper) only."""
import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy as cp

from softmax_lab.kernels._launch import cdiv
from softmax_lab.kernels.clustered import (cluster_barrier, shared_layout, slices, split_layout,
                                           whole_cluster_layout)


@gluon.jit
def once_kernel(out_ptr, in_ptr, partial_ptr, n_cols, n_cols_v, in_stride_v, out_row_stride,
                             SLICE: gl.constexpr, CHUNK: gl.constexpr, PARTS: gl.constexpr):
    VEC: gl.constexpr = 128 // in_ptr.dtype.element_ty.primitive_bitwidth  # elements per 16 bytes
    LOG2E: gl.constexpr = 1.4426950408889634
    N: gl.constexpr = SLICE // CHUNK
    layout: gl.constexpr = split_layout(VEC, gl.num_warps(), PARTS)
    row_smem = gl.allocate_shared_memory(in_ptr.dtype.element_ty, [N, PARTS, CHUNK], shared_layout(PARTS))
    exp_smem = gl.allocate_shared_memory(gl.float32, [N, PARTS, CHUNK], shared_layout(PARTS))
    row = gl.program_id(0).to(gl.int64)  # (the cluster's number)
    part = gl.arange(0, PARTS, layout=gl.SliceLayout(1, layout))
    cols = part[:, None] * SLICE + gl.arange(0, CHUNK, layout=gl.SliceLayout(0, layout))[None, :]
    src = in_ptr + row * (in_stride_v * VEC)
    for c in gl.static_range(N):  # 1. this program's slice on its way, a commit group per chunk
        cp.async_copy_global_to_shared(row_smem.index(c), src + c * CHUNK + cols,
                                       mask=c * CHUNK + cols < n_cols_v * VEC)
        cp.commit_group()
    m = gl.full([PARTS, CHUNK], float("-inf"), gl.float32, layout)
    for c in gl.static_range(N):  # 2. the slice's max, chunk by chunk as they land
        cp.wait_group(N - 1 - c)
        x = row_smem.index(c).load(layout).to(gl.float32)
        m = gl.maximum(m, gl.where(c * CHUNK + cols < n_cols, x, float("-inf")))
    m_part = gl.max(m, axis=1)
    shift = gl.where(m_part == float("-inf"), 0.0, m_part) * LOG2E  # (a slice of -inf only: its sum is 0)
    total = gl.zeros([PARTS, CHUNK], gl.float32, layout)
    for c in range(N):  # 3. the slice's sum of exp(x - its max)
        x = row_smem.index(c).load(layout).to(gl.float32)
        e = gl.where(c * CHUNK + cols < n_cols, gl.exp2(x * LOG2E - shift[:, None]), 0.0)
        exp_smem.index(c).store(e)
        total += e
    mine = partial_ptr + row * (2 * PARTS) + part * 2
    gl.store(mine, m_part)  # 4. the partials out, the barrier, everyone's partials in, combined
    gl.store(mine + 1, gl.sum(total, axis=1))
    cluster_barrier()
    every = gl.arange(0, PARTS, layout=whole_cluster_layout(gl.num_warps(), PARTS))
    theirs = partial_ptr + row * (2 * PARTS) + every * 2
    m_all = gl.load(theirs, volatile=True)  # (volatile: from L2, never a stale L1 line)
    l_all = gl.load(theirs + 1, volatile=True)
    m_row = gl.max(m_all, axis=0)
    scale = 1.0 / gl.sum(l_all * gl.exp2((m_all - m_row) * LOG2E), axis=0)
    factor = gl.exp2(shift - m_row * LOG2E) * scale
    dst = out_ptr + row * out_row_stride
    for c in range(N):  # 5. the exps kept, scaled, stored
        y = exp_smem.index(c).load(layout) * factor[:, None]
        gl.store(dst + c * CHUNK + cols, y.to(out_ptr.dtype.element_ty), mask=c * CHUNK + cols < n_cols)



def once_softmax(x, out=None, parts=None, num_warps=None, vectors=None):
    y = torch.empty_like(x) if out is None else out
    n_rows, n_cols = x.shape
    vec = 16 // x.element_size()
    o = slices(n_cols, x.element_size(), parts, num_warps, vectors)
    partials = torch.empty(n_rows * 2 * o["PARTS"], dtype=torch.float32, device=x.device)
    once_kernel[(n_rows,)](y, x, partials, n_cols, cdiv(n_cols, vec), x.stride(0) // vec, y.stride(0), **o)
    return y
