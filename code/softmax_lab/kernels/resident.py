"""Resident softmax: the row lives in shared memory, not in registers, so many programs share a multiprocessor.

``resident_softmax_kernel(out_ptr, in_ptr, n_cols, n_cols_v, in_stride_v, out_stride_v, BLOCK, CHUNK, OVERLAP,
OUT_VEC, ONLINE)``
  one program per row; n_cols_v, in_stride_v: the row length and the input's row stride in 16-byte vectors
  (so the compiler knows every copy is a whole vector); CHUNK: one 16-byte vector per thread; OVERLAP: a
  commit group per chunk, so the max pass starts while the row still arrives; out_stride_v: the output's row
  stride in pieces of OUT_VEC elements (a 16-byte vector when the rows are whole vectors, else 1: see
  ``_launch.row_vector``); ONLINE (with OVERLAP): the sum taken with the max as each chunk lands
  (``chunk_state.py``), so no pass of its own (but for rows far from 0)

The fused kernel holds its row in registers: a 16-bit row of 32,768 elements fills half a multiprocessor's
registers, so one program runs there at a time and its steps (load, reduce, store) never overlap. Here the
program copies its whole row into shared memory at once (``cp.async``: every copy in flight together), then
makes three passes over it, one vector per thread at a time: the max, the sum of exp, exp·(1/sum) stored.
Registers hold one vector, so the multiprocessor runs as many programs as their rows fit its 227 KB of
shared memory (three 64 KB rows), and one program's copies overlap another's passes and a third's stores.
Reading shared memory three times is cheap: it is an order of magnitude faster than HBM. (With 32 chunks or
more, e.g. fp32 rows of 32768 at 8 warps, the compiler unrolls the passes and keeps the row in registers again,
about 200 a thread: such a 128 KB row fits shared memory only once anyway.)

Written in Gluon (Triton's lower-level dialect: shared memory, layouts and copies are explicit); GPU only,
since Triton's CPU interpreter cannot run it. The dispatcher uses it, with ``overlap``, for rows too long for
the register kernels' tiles and short enough that a few fit one multiprocessor's shared memory, when they start
on 16 bytes (``docs/performance.md`` has what it measured against ``staged.py`` and the register kernels).
"""
import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy as cp

from . import chunk_state
from ._launch import cdiv, gluon_refusal, prepare_gluon, row_vector, whole_chunks


@gluon.jit
def row_sum(row_smem, m_row, n_cols, layout: gl.constexpr):
    """The sum of exp(x - m_row) over the row in shared memory (``[chunks, CHUNK]``), a chunk at a time."""
    N: gl.constexpr = row_smem.shape[0]
    CHUNK: gl.constexpr = row_smem.shape[1]
    cols = gl.arange(0, CHUNK, layout=layout)
    total = gl.zeros([CHUNK], gl.float32, layout)
    for c in range(N):
        x = row_smem.index(c).load(layout).to(gl.float32)
        total += gl.where(c * CHUNK + cols < n_cols, chunk_state.exp_minus(x, m_row), 0.0)
    return gl.sum(total, axis=0)


@gluon.jit
def resident_softmax_kernel(out_ptr, in_ptr, n_cols, n_cols_v, in_stride_v, out_stride_v,
                            BLOCK: gl.constexpr, CHUNK: gl.constexpr, OVERLAP: gl.constexpr = False,
                            OUT_VEC: gl.constexpr = 1, ONLINE: gl.constexpr = False):
    VEC: gl.constexpr = 128 // in_ptr.dtype.element_ty.primitive_bitwidth  # elements per 16 bytes
    layout: gl.constexpr = gl.BlockedLayout([VEC], [32], [gl.num_warps()], [0])  # one vector a thread
    N: gl.constexpr = BLOCK // CHUNK
    row_smem = gl.allocate_shared_memory(in_ptr.dtype.element_ty, [N, CHUNK], gl.SwizzledSharedLayout(1, 1, 1, [0]))
    row = gl.program_id(0).to(gl.int64)
    cols = gl.arange(0, CHUNK, layout=layout)
    src = in_ptr + row * (in_stride_v * VEC)  # (row: 64-bit; the stride fits 32 bits, see _launch.vector_refusal)
    gl.static_assert(OVERLAP or not ONLINE, "ONLINE takes the sum as the chunks land: it needs OVERLAP")
    m = gl.full([CHUNK], float("-inf"), gl.float32, layout)
    if OVERLAP:  # 1-2. a commit group per chunk: the max starts on the first chunk while the others arrive
        for c in gl.static_range(N):
            cp.async_copy_global_to_shared(row_smem.index(c), src + c * CHUNK + cols,
                                           mask=c * CHUNK + cols < n_cols_v * VEC)
            cp.commit_group()
        m_t, l_t = chunk_state.start(CHUNK, VEC)
        for c in gl.static_range(N):
            cp.wait_group(N - 1 - c)  # chunk c has landed (each thread reads back only what it copied)
            x = row_smem.index(c).load(layout).to(gl.float32)
            x = gl.where(c * CHUNK + cols < n_cols, x, float("-inf"))
            if ONLINE:  # the sum too, as the chunks land (chunk_state.py)
                m_t, l_t = chunk_state.fold(m_t, l_t, x, VEC)
            else:
                m = gl.maximum(m, x)
    else:
        for c in range(N):  # 1. the whole row on its way (whole vectors; past the row's end: zeros, unread)
            cp.async_copy_global_to_shared(row_smem.index(c), src + c * CHUNK + cols,
                                           mask=c * CHUNK + cols < n_cols_v * VEC)
        cp.commit_group()
        cp.wait_group(0)  # this thread's copies have landed...
        gl.thread_barrier()  # ... and everyone's
        for c in range(N):  # 2. the max (a range loop, not unrolled: one vector in registers at a time)
            x = row_smem.index(c).load(layout).to(gl.float32)
            m = gl.maximum(m, gl.where(c * CHUNK + cols < n_cols, x, float("-inf")))
    if ONLINE:
        m_row, total, far = chunk_state.finish(m_t, l_t)
        if far:  # a row far from 0: the sum again, from x - max (chunk_state.py)
            total = row_sum(row_smem, m_row, n_cols, layout)
    else:
        m_row = gl.max(m, axis=0)
        total = row_sum(row_smem, m_row, n_cols, layout)  # 3. the sum of exp(x - max)
    dst = out_ptr + row * (out_stride_v * OUT_VEC)  # (the order clustered.py measured faster)
    if OUT_VEC == VEC:  # whole vectors: the compiler sees it, and stores 16 bytes at a time
        end = n_cols_v * VEC
    else:
        end = n_cols
    log2_scale = -gl.log2(total)  # (y = exp(x - max) / total)
    for c in range(N):  # 4. exp again, scaled, stored
        x = row_smem.index(c).load(layout).to(gl.float32)
        y = chunk_state.exp_minus_times(x, m_row, log2_scale)
        gl.store(dst + c * CHUNK + cols, y.to(out_ptr.dtype.element_ty), mask=c * CHUNK + cols < end)


def shared_row(n_cols: int, element_size: int, num_warps=None) -> tuple[int, int]:
    """(BLOCK, CHUNK): the row's room in shared memory, whole chunks of one 16-byte vector a thread (a little
    more than the row, not the next power of two)."""
    chunk = 32 * (num_warps or 8) * 16 // element_size
    return whole_chunks(n_cols, chunk) * chunk, chunk


def refusal(x: torch.Tensor, num_warps=None, overlap=False, online=False) -> str:
    """Why this GPU or ``x`` cannot take the kernel (``gluon_refusal``), or ''."""
    block, chunk = shared_row(x.shape[1], x.element_size(), num_warps)
    if online and block // chunk > 32:
        return (f"resident_softmax: online takes the row in at most 32 chunks; this row is {block // chunk} chunks of "
                f"{chunk} elements: use more warps")
    return gluon_refusal(x, "resident_softmax", row_bytes=block * x.element_size())


def launch_setup(y, x, num_warps=None, overlap=False, online=False):
    """(kernel, grid, args, options) of one launch (the dispatcher's fast path reuses it)."""
    n_rows, n_cols = x.shape
    vec = 16 // x.element_size()
    BLOCK, chunk = shared_row(n_cols, x.element_size(), num_warps)
    overlap = bool(overlap or online) and BLOCK // chunk <= 32  # (wait_group counts stop at 63: few chunks only)
    if online and not overlap:
        raise ValueError(refusal(x, num_warps, overlap, online))
    out_vec = row_vector(n_cols, y)
    options = dict(BLOCK=BLOCK, CHUNK=chunk, OVERLAP=overlap, OUT_VEC=out_vec, ONLINE=bool(online),
                   num_warps=num_warps or 8)
    args = (y, x, n_cols, cdiv(n_cols, vec), x.stride(0) // vec, y.stride(0) // out_vec)
    return resident_softmax_kernel, (n_rows,), args, options


def resident_softmax(x: torch.Tensor, out: torch.Tensor | None = None, num_warps: int | None = None,
                     overlap: bool = False, online: bool = False) -> torch.Tensor:
    """Softmax over the last dim of 2-D ``x`` (GPU; rows starting on 16 bytes, up to 65536 fp16/bf16 or
    32768 fp32 elements: the row must fit shared memory). Knobs: ``num_warps`` (default 8), ``overlap``
    (take the max of each chunk as soon as it lands, instead of after the whole row), ``online`` (the sum too,
    so the sum's pass goes away: ``chunk_state.py``; implies ``overlap``, so at most 32 chunks)."""
    x, y = prepare_gluon(x, out, "resident_softmax", lambda x: refusal(x, num_warps), num_warps=num_warps)
    if x.numel() == 0:
        return y
    kernel, grid, args, options = launch_setup(y, x, num_warps, overlap, online)
    kernel[grid](*args, **options)
    return y
