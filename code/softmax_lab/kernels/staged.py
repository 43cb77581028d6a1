"""Staged softmax: rows wait in shared memory, so HBM keeps reading while a row is reduced and stored.

``staged_softmax_kernel(out_ptr, in_ptr, n_rows, n_cols, n_cols_v, in_stride_v, out_row_stride, BLOCK, STAGES)``
  one persistent program per multiprocessor; program p handles rows p, p+P, p+2P, ... (P programs)
  n_cols_v, in_stride_v  the row length and the input's row stride in 16-byte vectors (8 fp16/bf16, 4 fp32),
                         so the compiler knows every copy is a whole vector; out_row_stride in elements
  STAGES                 rows held in shared memory: the one being read and the next STAGES-1 in flight

The fused kernel reads a row, reduces it, writes it, then reads the next: its load waits for nothing else,
but nothing overlaps it either, and at one 1024-thread program per multiprocessor (the row fills the
registers) the memory stays idle while a row is reduced. Here the next rows are already on their way: copies
from global to shared memory (``cp.async``) run in the background while this row goes from shared memory to
registers, is reduced and stored. It is written in Gluon, Triton's lower-level dialect, which names shared
memory, register layouts and barriers explicitly (plain Triton 3.6 does not pipeline such loads).

GPU only: Triton's CPU interpreter cannot run Gluon. It beat the register kernels on long 16-bit rows, and no
more with more stages: the program's own steps are now the limit (``docs/performance.md``). ``resident.py`` goes
one step further (the row stays in shared memory, so many programs share a multiprocessor) and is what the
dispatcher uses; this kernel is kept as the step between (chapter 10).
"""
import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy as cp

from . import chunk_state
from ._launch import cdiv, device_limits, gluon_refusal, next_power_of_2, num_sms, prepare_gluon


@gluon.jit
def _copy_row(buf, in_ptr, row, n_rows, in_stride_v, n_cols_v, cols, VEC: gl.constexpr):
    # Whole 16-byte vectors up to the row's end (lanes past n_cols are dropped after the load from shared);
    # past the last row, nothing is read. One commit group per row, even an empty one, keeps the count.
    ok = (cols < n_cols_v * VEC) & (row < n_rows)
    cp.async_copy_global_to_shared(buf, in_ptr + row.to(gl.int64) * (in_stride_v * VEC) + cols, mask=ok)
    cp.commit_group()


@gluon.jit
def staged_softmax_kernel(out_ptr, in_ptr, n_rows, n_cols, n_cols_v, in_stride_v, out_row_stride,
                          BLOCK: gl.constexpr, STAGES: gl.constexpr):
    VEC: gl.constexpr = 128 // in_ptr.dtype.element_ty.primitive_bitwidth  # elements per 16 bytes
    layout: gl.constexpr = gl.BlockedLayout([VEC], [32], [gl.num_warps()], [0])  # 16 bytes a thread, in a row
    rows = gl.allocate_shared_memory(in_ptr.dtype.element_ty, [STAGES, BLOCK], gl.SwizzledSharedLayout(1, 1, 1, [0]))
    pid, P = gl.program_id(0), gl.num_programs(0)
    cols = gl.arange(0, BLOCK, layout=layout)
    for s in gl.static_range(STAGES - 1):  # the first STAGES-1 rows on their way
        _copy_row(rows.index(s), in_ptr, pid + s * P, n_rows, in_stride_v, n_cols_v, cols, VEC)
    if STAGES == 1:
        _copy_row(rows.index(0), in_ptr, pid, n_rows, in_stride_v, n_cols_v, cols, VEC)
    i = 0
    for row in range(pid, n_rows, P):
        if STAGES > 1:  # refill the stage every warp finished reading in the last iteration
            gl.thread_barrier()
            _copy_row(rows.index((i + STAGES - 1) % STAGES), in_ptr, row + (STAGES - 1) * P, n_rows, in_stride_v,
                      n_cols_v, cols, VEC)
        cp.wait_group(STAGES - 1)  # this thread's copies of this row have landed...
        gl.thread_barrier()  # ... and every other thread's
        x = rows.index(i % STAGES).load(layout)
        if STAGES == 1:  # the row is in registers everywhere: its stage may take the next row
            gl.thread_barrier()
            _copy_row(rows.index(0), in_ptr, row + P, n_rows, in_stride_v, n_cols_v, cols, VEC)
        x = gl.where(cols < n_cols, x, float("-inf")).to(gl.float32)  # -inf past the end, as in fused
        num = chunk_state.exp_minus(x, gl.max(x, axis=0))  # exp(x - max)
        y = num * (1.0 / gl.sum(num, axis=0))
        gl.store(out_ptr + row.to(gl.int64) * out_row_stride + cols, y.to(out_ptr.dtype.element_ty),
                 mask=cols < n_cols)
        i += 1
    cp.wait_group(0)  # the empty copies issued past the last row, before the program ends


def staged_softmax(x: torch.Tensor, out: torch.Tensor | None = None, STAGES: int | None = None,
                   num_warps: int | None = None, programs: int | None = None) -> torch.Tensor:
    """Softmax over the last dim of 2-D ``x`` (GPU; rows starting on 16 bytes). Knobs: ``STAGES`` (rows in
    shared memory, default as many as fit, at most 3), ``num_warps`` (default 32), ``programs`` (default one
    per multiprocessor)."""
    x, y = prepare_gluon(x, out, "staged_softmax", STAGES=STAGES, num_warps=num_warps, programs=programs)
    n_rows, n_cols = x.shape
    if x.numel() == 0:
        return y
    vec = 16 // x.element_size()
    num_warps = num_warps or 32
    BLOCK = max(next_power_of_2(n_cols), 32 * num_warps * vec)  # at least one 16-byte vector per thread
    shared = device_limits(x.device)[1]
    STAGES = STAGES or max(1, min(3, shared // (BLOCK * x.element_size())))
    refusal = gluon_refusal(x, f"staged_softmax with STAGES={STAGES}", STAGES * BLOCK * x.element_size())
    if refusal:
        raise ValueError(refusal + " (or fewer STAGES)")
    grid = (min(programs or num_sms(x.device), n_rows),)
    staged_softmax_kernel[grid](y, x, n_rows, n_cols, cdiv(n_cols, vec), x.stride(0) // vec, y.stride(0),
                                BLOCK=BLOCK, STAGES=STAGES, num_warps=num_warps)
    return y
