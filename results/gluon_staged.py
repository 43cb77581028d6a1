"""Persistent, cp.async-staged softmax forward in Gluon (Triton 3.6.0) for long rows.

Program p handles rows p, p+P, p+2P, ... (P = grid size). While a row is reduced and stored, the copy of the
next row global->shared (cp.async, LDGSTS) is already in flight, so HBM reads overlap compute and stores.
"""
import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy as cp

SMEM_LIMIT = 227 * 1024  # opt-in shared memory per block on sm_90


@gluon.jit
def _issue_row(buf, in_ptr, row, n_rows, in_stride, n_cols, cols, VEC: gl.constexpr):
    # Copy-side mask at 16-byte granularity (cols < n_cols rounded up to VEC) so every LDGSTS moves 16 bytes;
    # lanes past n_cols (same 16-byte chunk as valid data) are discarded on the shared->register load.
    n_vec = (n_cols + VEC - 1) // VEC * VEC
    ok = (cols < n_vec) & (row < n_rows)  # row >= n_rows: no global read (src-size 0, zero fill)
    cp.async_copy_global_to_shared(buf, in_ptr + row.to(gl.int64) * in_stride + cols, mask=ok)
    cp.commit_group()


@gluon.jit
def staged_softmax_kernel(out_ptr, in_ptr, n_rows, n_cols, in_stride, out_stride,
                          BLOCK: gl.constexpr, STAGES: gl.constexpr):
    VEC: gl.constexpr = 128 // in_ptr.dtype.element_ty.primitive_bitwidth  # elements per 16 bytes
    layout: gl.constexpr = gl.BlockedLayout([VEC], [32], [gl.num_warps()], [0])
    RECOMPUTE: gl.constexpr = BLOCK // (32 * gl.num_warps()) > 32
    LOG2E: gl.constexpr = 1.4426950408889634
    smem_layout: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0])  # plain, no swizzle
    smem = gl.allocate_shared_memory(in_ptr.dtype.element_ty, [STAGES, BLOCK], smem_layout)

    pid = gl.program_id(0)
    P = gl.num_programs(0)
    cols = gl.arange(0, BLOCK, layout=layout)
    in_row = cols < n_cols

    _issue_row(smem.index(0), in_ptr, pid, n_rows, in_stride, n_cols, cols, VEC)  # prologue: first row
    stage = 0
    for row in range(pid, n_rows, P):
        if STAGES == 2:
            # Stage stage^1 was read in the previous iteration; every warp finished that read before the
            # barrier, so the next row may now be copied into it while this row is processed.
            gl.thread_barrier()
            _issue_row(smem.index(stage ^ 1), in_ptr, row + P, n_rows, in_stride, n_cols, cols, VEC)
            cp.wait_group(1)  # this thread's copies of the current row are done (next row still in flight)
        else:
            cp.wait_group(0)
        gl.thread_barrier()  # ... and every other thread's too
        x = smem.index(stage).load(layout)
        if STAGES == 1:
            gl.thread_barrier()  # all warps hold the row in registers: the buffer may be overwritten
            _issue_row(smem.index(0), in_ptr, row + P, n_rows, in_stride, n_cols, cols, VEC)

        x = gl.where(in_row, x, float("-inf"))  # tail lanes
        m = gl.max(x, axis=0).to(gl.float32) * LOG2E  # (gl.max widens bf16 but not fp16)
        e = gl.exp2(x.to(gl.float32) * LOG2E - m)  # exp(x - max); tail lanes give exp2(-inf) = 0
        if RECOMPUTE:  # > 32 elements per thread: do not keep e live next to x; exp twice (fewer spills)
            y = gl.exp2(x.to(gl.float32) * LOG2E - (m + gl.log2(gl.sum(e, axis=0))))
        else:
            y = e * (1.0 / gl.sum(e, axis=0))
        gl.store(out_ptr + row.to(gl.int64) * out_stride + cols, y.to(out_ptr.dtype.element_ty), mask=in_row)
        if STAGES == 2:
            stage = stage ^ 1
    cp.wait_group(0)  # drain the (masked, empty) copy issued in the last iteration before exit


def staged_softmax(x: torch.Tensor, out: torch.Tensor = None, STAGES: int = 2, num_warps: int = 32,
                   programs: int = None) -> torch.Tensor:
    """Softmax over the last dim of a 2-D CUDA tensor with unit column stride and 16-byte aligned rows."""
    assert x.is_cuda and x.dim() == 2 and x.stride(1) == 1, "2-D CUDA tensor with contiguous rows"
    assert x.dtype in (torch.float16, torch.bfloat16, torch.float32)
    assert STAGES in (1, 2)
    n_rows, n_cols = x.shape
    if out is None:
        out = torch.empty_like(x)
    assert out.shape == x.shape and out.stride(1) == 1 and out.dtype in (torch.float16, torch.bfloat16,
                                                                          torch.float32)
    # cp.async moves 16-byte chunks: row starts must be 16-byte aligned (the copy reads up to the end of
    # the last row's final 16-byte chunk, never further).
    assert x.data_ptr() % 16 == 0 and (x.stride(0) * x.element_size()) % 16 == 0, "rows must be 16-byte aligned"
    if n_rows == 0 or n_cols == 0:
        return out
    BLOCK = triton.next_power_of_2(n_cols)
    vec = 16 // x.element_size()
    assert BLOCK >= 32 * num_warps * vec, f"BLOCK={BLOCK} too small for {num_warps} warps of 16-byte vectors"
    smem = STAGES * BLOCK * x.element_size()
    assert smem <= SMEM_LIMIT, f"{STAGES} x {BLOCK} x {x.element_size()} B = {smem} B > 227 KB of shared memory"
    if programs is None:
        programs = torch.cuda.get_device_properties(x.device).multi_processor_count
    grid = (max(1, min(programs, n_rows)),)
    staged_softmax_kernel[grid](out, x, n_rows, n_cols, x.stride(0), out.stride(0), BLOCK=BLOCK, STAGES=STAGES,
                                num_warps=num_warps)
    return out
