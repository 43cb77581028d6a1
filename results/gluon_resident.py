"""Issue 15 probe: softmax with the row resident in shared memory, not in registers (Gluon, Triton 3.6.0).

One program per row. It copies its whole row into shared memory at once (cp.async, 16 bytes a thread per
copy), then makes three passes over shared memory in chunks of one 16-byte vector per thread: max, sum of
exp, exp/scale/store. Registers hold one chunk, so a multiprocessor runs as many programs as their rows fit
its 227 KB of shared memory (three rows of 64 KB), and their copies, passes and stores overlap.
"""
import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy as cp


@gluon.jit
def resident_softmax_kernel(out_ptr, in_ptr, n_cols, n_cols_v, in_stride_v, out_row_stride,
                            BLOCK: gl.constexpr, CHUNK: gl.constexpr):
    VEC: gl.constexpr = 128 // in_ptr.dtype.element_ty.primitive_bitwidth  # elements per 16 bytes
    layout: gl.constexpr = gl.BlockedLayout([CHUNK // (32 * gl.num_warps())], [32], [gl.num_warps()], [0])
    LOG2E: gl.constexpr = 1.4426950408889634
    N: gl.constexpr = BLOCK // CHUNK
    row_smem = gl.allocate_shared_memory(in_ptr.dtype.element_ty, [N, CHUNK], gl.SwizzledSharedLayout(1, 1, 1, [0]))
    row = gl.program_id(0).to(gl.int64)
    cols = gl.arange(0, CHUNK, layout=layout)
    src = in_ptr + row * (in_stride_v * VEC)
    for c in range(N):  # the whole row on its way at once
        cp.async_copy_global_to_shared(row_smem.index(c), src + c * CHUNK + cols, mask=c * CHUNK + cols < n_cols_v * VEC)
    cp.commit_group()
    cp.wait_group(0)
    gl.thread_barrier()
    m = gl.full([CHUNK], float("-inf"), gl.float32, layout)
    for c in range(N):
        x = row_smem.index(c).load(layout).to(gl.float32)
        m = gl.maximum(m, gl.where(c * CHUNK + cols < n_cols, x, float("-inf")))
    mx = gl.max(m, axis=0) * LOG2E
    s = gl.zeros([CHUNK], gl.float32, layout)
    for c in range(N):
        x = row_smem.index(c).load(layout).to(gl.float32)
        s += gl.where(c * CHUNK + cols < n_cols, gl.exp2(x * LOG2E - mx), 0.0)
    inv = 1.0 / gl.sum(s, axis=0)
    dst = out_ptr + row * out_row_stride
    for c in range(N):
        x = row_smem.index(c).load(layout).to(gl.float32)
        y = gl.exp2(x * LOG2E - mx) * inv
        gl.store(dst + c * CHUNK + cols, y.to(out_ptr.dtype.element_ty), mask=c * CHUNK + cols < n_cols)


def resident_softmax(x: torch.Tensor, out: torch.Tensor = None, num_warps: int = 8, vectors: int = 1):
    """Softmax over the last dim of a 2-D CUDA tensor whose rows start on 16 bytes (``vectors``: 16-byte
    vectors per thread per chunk)."""
    assert x.is_cuda and x.dim() == 2 and x.stride(1) == 1
    n_rows, n_cols = x.shape
    out = torch.empty_like(x) if out is None else out
    vec = 16 // x.element_size()
    assert x.data_ptr() % 16 == 0 and x.stride(0) % vec == 0, "rows must start on 16-byte boundaries"
    chunk = 32 * num_warps * vec * vectors
    block = max(triton.next_power_of_2(n_cols), chunk)
    assert block * x.element_size() <= 227 * 1024, "the row must fit shared memory"
    resident_softmax_kernel[(n_rows,)](out, x, n_cols, -(-n_cols // vec), x.stride(0) // vec, out.stride(0),
                                       BLOCK=block, CHUNK=chunk, num_warps=num_warps)
    return out
