"""Persistent, cp.async-staged softmax forward in Gluon (Triton 3.6.0) for long 16-bit rows (issue 15 probe).

Program p handles rows p, p+P, p+2P, ... (P = grid size). Shared memory holds STAGES rows: while one row is
reduced and stored from registers, the copies (cp.async, LDGSTS) of the next STAGES-1 rows are in flight, so HBM
reads overlap compute and stores. Lengths and strides are passed in 16-byte vectors, so every copy is 16 bytes.
"""
import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy as cp

SMEM_LIMIT = 227 * 1024  # opt-in shared memory per block on sm_90


@gluon.jit
def _issue_row(buf, in_ptr, row, n_rows, in_stride_v, n_cols_v, cols, VEC: gl.constexpr):
    # Whole 16-byte vectors up to the row's end (lanes past n_cols are dropped after the load from shared);
    # row >= n_rows: no global read at all (src-size 0). One commit group per row, empty or not.
    ok = (cols < n_cols_v * VEC) & (row < n_rows)
    cp.async_copy_global_to_shared(buf, in_ptr + row.to(gl.int64) * (in_stride_v * VEC) + cols, mask=ok)
    cp.commit_group()


@gluon.jit
def staged_softmax_kernel(out_ptr, in_ptr, n_rows, n_cols, n_cols_v, in_stride_v, out_stride_v,
                          BLOCK: gl.constexpr, STAGES: gl.constexpr):
    VEC: gl.constexpr = 128 // in_ptr.dtype.element_ty.primitive_bitwidth  # elements per 16 bytes
    layout: gl.constexpr = gl.BlockedLayout([VEC], [32], [gl.num_warps()], [0])
    LOG2E: gl.constexpr = 1.4426950408889634
    smem = gl.allocate_shared_memory(in_ptr.dtype.element_ty, [STAGES, BLOCK], gl.SwizzledSharedLayout(1, 1, 1, [0]))
    pid = gl.program_id(0)
    P = gl.num_programs(0)
    cols = gl.arange(0, BLOCK, layout=layout)
    in_row = cols < n_cols
    for s in gl.static_range(STAGES - 1):  # prologue: the first STAGES-1 rows in flight (STAGES=1: the first)
        _issue_row(smem.index(s), in_ptr, pid + s * P, n_rows, in_stride_v, n_cols_v, cols, VEC)
    if STAGES == 1:
        _issue_row(smem.index(0), in_ptr, pid, n_rows, in_stride_v, n_cols_v, cols, VEC)
    i = 0
    for row in range(pid, n_rows, P):
        if STAGES > 1:
            gl.thread_barrier()  # every warp has read the stage filled below (last iteration's row)
            _issue_row(smem.index((i + STAGES - 1) % STAGES), in_ptr, row + (STAGES - 1) * P, n_rows,
                       in_stride_v, n_cols_v, cols, VEC)
        cp.wait_group(STAGES - 1)  # this thread's copies of this row have landed...
        gl.thread_barrier()  # ... and every other thread's
        x = smem.index(i % STAGES).load(layout)
        if STAGES == 1:
            gl.thread_barrier()  # the row is in registers everywhere: its buffer may take the next row
            _issue_row(smem.index(0), in_ptr, row + P, n_rows, in_stride_v, n_cols_v, cols, VEC)
        x = gl.where(in_row, x, float("-inf")).to(gl.float32)
        m = gl.max(x, axis=0) * LOG2E
        e = gl.exp2(x * LOG2E - m)  # exp(x - max); lanes past the end give 0
        y = e * (1.0 / gl.sum(e, axis=0))
        gl.store(out_ptr + row.to(gl.int64) * (out_stride_v * VEC) + cols, y.to(out_ptr.dtype.element_ty),
                 mask=in_row)
        i += 1
    cp.wait_group(0)  # the (empty) copies issued past the last row, before exit


def staged_softmax(x: torch.Tensor, out: torch.Tensor = None, STAGES: int = 2, num_warps: int = 32,
                   programs: int = None) -> torch.Tensor:
    """Softmax over the last dim of a 2-D CUDA tensor whose rows are contiguous and start on 16 bytes."""
    assert x.is_cuda and x.dim() == 2 and x.stride(1) == 1, "2-D CUDA tensor with contiguous rows"
    assert x.dtype in (torch.float16, torch.bfloat16, torch.float32)
    n_rows, n_cols = x.shape
    if out is None:
        out = torch.empty_like(x)
    assert out.shape == x.shape and out.stride(1) == 1 and out.dtype == x.dtype
    vec = 16 // x.element_size()
    for t in (x, out):  # cp.async moves whole 16-byte vectors (up to the end of the row's last vector)
        assert t.data_ptr() % 16 == 0 and t.stride(0) % vec == 0, "rows must start on 16-byte boundaries"
    if n_rows == 0 or n_cols == 0:
        return out
    BLOCK = triton.next_power_of_2(n_cols)
    assert BLOCK >= 32 * num_warps * vec, f"BLOCK={BLOCK} too small for {num_warps} warps of 16-byte vectors"
    smem = STAGES * BLOCK * x.element_size()
    assert smem <= SMEM_LIMIT, f"{STAGES} x {BLOCK} x {x.element_size()} B = {smem} B > 227 KB of shared memory"
    if programs is None:
        programs = torch.cuda.get_device_properties(x.device).multi_processor_count
    grid = (max(1, min(programs, n_rows)),)
    staged_softmax_kernel[grid](out, x, n_rows, n_cols, -(-n_cols // vec), x.stride(0) // vec, out.stride(0) // vec,
                                BLOCK=BLOCK, STAGES=STAGES, num_warps=num_warps)
    return out
