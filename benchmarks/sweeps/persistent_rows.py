"""Issue 28, round 7: the sweeps behind ``tuning.RESIDENT_BACKWARD`` (``kernels/resident_backward.py``), and the same
persistent form for the forward, which lost (its kernel is here, not in the package). Each shape on the kernel it
ran on before and on the new kernel at each warp count that fits, beside the dispatcher, PyTorch's kernel and a
copy of the same bytes (``bench.compare``: buffers past the L2 cache, results checked against float64 before and
after timing). GPU machine (sm_90), repository root:

    PYTHONPATH=code python3 benchmarks/sweeps/persistent_rows.py OUT.json backward  # h200-backward-round7.json
    PYTHONPATH=code python3 benchmarks/sweeps/persistent_rows.py OUT.json forward   # h200-forward-round7.json
    PYTHONPATH=code python3 benchmarks/sweeps/persistent_rows.py OUT.json variants  # h200-forward-variants-round7.json
    PYTHONPATH=code python3 benchmarks/sweeps/persistent_rows.py OUT.json lines     # h200-backward-lines-round7.json

``forward``: the persistent forward (below) at 4-32 warps. ``variants``: it again with the whole row stored before
the next row's copies (``SPLIT``) and on one program a row instead of a persistent grid, and ``resident_backward`` on
one program a row (the record named ran as a scratch script with these forward kernels, under other names, and
two online forms not kept here; its backward candidates failed before launching: see its ``meta.note``).
``lines``: ``resident_backward`` with its windows from each row's vector (``line=16``) and from its 128-byte line
(``line=128``), at the dispatcher's warps and at 32. What they showed, and the rules taken from them:
docs/performance.md, "Issue 28, round 7".
"""
import sys

import torch

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy as cp

from softmax_lab import bench
from softmax_lab.kernels import cooperative_backward
from softmax_lab.kernels import resident_backward as backward_module
from softmax_lab.kernels.cooperative import resident_programs
from softmax_lab.kernels.resident_backward import refusal, resident_backward
from softmax_lab.kernels.tuning import RESIDENT_BACKWARD, element_size, pick
from softmax_lab.kernels.unaligned import takes, unaligned_backward, windows

F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16
BACKWARD = [(2048, 50257, BF16), (2048, 50257, F16), (4096, 32001, BF16), (2048, 32768, BF16), (4096, 20000, BF16),
            (4096, 24577, BF16), (8192, 16385, BF16), (1024, 57337, BF16), (4096, 16385, F32), (4096, 20000, F32),
            (2048, 28669, F32)]
FORWARD = [(1024, 65536, BF16), (1024, 65536, F16), (2048, 65536, BF16), (2048, 50257, BF16), (2048, 50264, BF16),
           (2048, 32768, BF16), (2048, 57344, BF16), (1024, 61440, BF16), (4096, 40000, BF16), (8192, 16385, BF16),
           (4096, 20000, F32), (2048, 28669, F32), (2048, 28672, F32)]


# The persistent forward (round 7, lost): one program keeps a row's window in shared memory (cp.async, whole 16-byte
# vectors from the one holding the row's first element), takes the max as chunks land, the sum of exp, and stores
# the row chunk by chunk, copying its next row (pid + programs) into each chunk's room as it is stored. As
# ``resident_backward`` does, which won; here each program's two exp passes leave the memory idle (see the docs).
@gluon.jit
def window(ptr, first, r, row_stride, VEC: gl.constexpr):
    # Row r's window: the 16-byte vector holding its first element, and `head`, the elements from there to the row.
    start = first + r * row_stride
    return ptr + (start // VEC) * VEC, (start % VEC).to(gl.int32)


@gluon.jit
def persistent_resident_kernel(out_ptr, in_ptr, in_first, in_row_stride, out_first, out_row_stride, n_rows, n_cols,
                               BLOCK: gl.constexpr, CHUNK: gl.constexpr, SPLIT: gl.constexpr = False):
    VEC: gl.constexpr = 128 // in_ptr.dtype.element_ty.primitive_bitwidth  # elements per 16 bytes
    layout: gl.constexpr = gl.BlockedLayout([VEC], [32], [gl.num_warps()], [0])  # one vector a thread
    one: gl.constexpr = gl.BlockedLayout([1], [32], [gl.num_warps()], [0])  # the head and tail pieces
    LOG2E: gl.constexpr = 1.4426950408889634
    N: gl.constexpr = BLOCK // CHUNK
    room = gl.allocate_shared_memory(in_ptr.dtype.element_ty, [N, CHUNK], gl.SwizzledSharedLayout(1, 1, 1, [0]))
    cols = gl.arange(0, CHUNK, layout=layout)
    j = gl.arange(0, 2 * VEC, layout=one)
    programs = gl.num_programs(0)
    src, head = window(in_ptr, in_first, gl.program_id(0).to(gl.int64), in_row_stride, VEC)
    for c in gl.static_range(N):  # 1. the first row's window on its way, a commit group per chunk
        p = c * CHUNK + cols
        cp.async_copy_global_to_shared(room.index(c), src + p, mask=p < ((head + n_cols + VEC - 1) // VEC) * VEC)
        cp.commit_group()
    for r in range(gl.program_id(0).to(gl.int64), n_rows, programs):
        src, head = window(in_ptr, in_first, r, in_row_stride, VEC)
        dst, _ = window(out_ptr, out_first, r, out_row_stride, VEC)
        end = head + n_cols  # the row is window positions [head, end)
        lo, hi = ((head + VEC - 1) // VEC) * VEC, (end // VEC) * VEC  # the whole vectors inside it: [lo, hi)
        q = gl.where(j < VEC, j, hi + j - VEC)  # 2. the head and tail pieces, [head, lo) and [max(hi, lo), end)
        ok = (q >= head) & (q < end) & gl.where(j < VEC, q < lo, q >= lo)
        x_q = gl.load(src + q, mask=ok, other=0.0).to(gl.float32)
        m = gl.full([CHUNK], float("-inf"), gl.float32, layout)
        for c in gl.static_range(N):  # 3. the max of each chunk as soon as it lands
            cp.wait_group(N - 1 - c)
            x = room.index(c).load(layout).to(gl.float32)
            m = gl.maximum(m, gl.where((c * CHUNK + cols - head).to(gl.uint32) < n_cols, x, float("-inf")))
        m_row = gl.max(m, axis=0) * LOG2E
        total = gl.zeros([CHUNK], gl.float32, layout)
        for c in range(N):  # 4. the sum of exp(x - max), as exp2(x·log2 e - max·log2 e)
            x = room.index(c).load(layout).to(gl.float32)
            inside = (c * CHUNK + cols - head).to(gl.uint32) < n_cols
            total += gl.where(inside, gl.exp2(x * LOG2E - m_row), 0.0)
        scale = 1.0 / gl.sum(total, axis=0)
        n_src, n_head = window(in_ptr, in_first, r + programs, in_row_stride, VEC)  # (the next row)
        n_reach = gl.where(r + programs < n_rows, ((n_head + n_cols + VEC - 1) // VEC) * VEC, 0)
        if SPLIT:  # 5'. the whole row stored, then the next row's copies
            for c in range(N):
                p = c * CHUNK + cols
                x = room.index(c).load(layout).to(gl.float32)
                y = gl.exp2(x * LOG2E - m_row) * scale
                gl.store(dst + p, y.to(out_ptr.dtype.element_ty), mask=(p >= lo) & (p < hi))
            gl.thread_barrier()
            for c in gl.static_range(N):
                p = c * CHUNK + cols
                cp.async_copy_global_to_shared(room.index(c), n_src + p, mask=p < n_reach)
                cp.commit_group()
        else:  # 5. the row stored chunk by chunk, each chunk's room taken by the next row's
            for c in gl.static_range(N):
                p = c * CHUNK + cols
                x = room.index(c).load(layout).to(gl.float32)
                y = gl.exp2(x * LOG2E - m_row) * scale
                gl.store(dst + p, y.to(out_ptr.dtype.element_ty), mask=(p >= lo) & (p < hi))
                cp.async_copy_global_to_shared(room.index(c), n_src + p, mask=p < n_reach)
                cp.commit_group()
        y_q = gl.exp2(x_q * LOG2E - m_row) * scale  # 6. the pieces, one element at a time
        gl.store(dst + q, y_q.to(out_ptr.dtype.element_ty), mask=ok)


def persistent_forward(x, out, num_warps, split=False, per_row=False):
    """Launch the persistent forward on ``x`` (rows lying like ``out``'s around 16-byte vectors): as many programs
    as the GPU holds at once (``per_row``: one a row)."""
    (x_base, y_base), (x_first, y_first), _ = windows(x, out)
    chunk = 32 * num_warps * 16 // x.element_size()
    block = -(-(x.shape[1] + 16 // x.element_size() - 1) // chunk) * chunk
    args = (y_base, x_base, x_first, x.stride(0), y_first, out.stride(0), *x.shape)
    options = dict(BLOCK=block, CHUNK=chunk, SPLIT=split, num_warps=num_warps)
    at_once = resident_programs(persistent_resident_kernel, args, (1,), x.device, **options)
    grid = x.shape[0] if per_row else max(1, min(x.shape[0], at_once))
    persistent_resident_kernel[(grid,)](*args, **options)
    return out


def forward_fits(n_cols, dtype, num_warps):
    """The persistent forward's room: at most 32 chunks, within one program's 227 KB."""
    size = torch.empty((), dtype=dtype).element_size()
    chunk = 32 * num_warps * 16 // size
    chunks = -(-(n_cols + 16 // size - 1) // chunk)
    return chunks <= 32 and chunks * chunk * size <= 227 * 1024


def backward_per_row(y, dy, out, num_warps):
    """``resident_backward`` with one program a row instead of a persistent grid."""
    kernel, _, args, options = backward_module.launch_setup(out, y, dy, num_warps)
    kernel[(y.shape[0],)](*args, **options)
    return out


def before(y, dy, out):
    """The backward kernel this shape ran on before round 7."""
    if takes(y, dy, out):
        return unaligned_backward(y, dy, out)
    return cooperative_backward(y, dy, out)


def candidates(kind, n_cols, dtype):
    probe = torch.empty((2, n_cols), dtype=dtype, device="cuda")
    if kind == "forward":  # (the dispatcher's kernel is timed anyway: bench.compare's "softmax_lab.softmax")
        return [("persistent_resident", lambda x, out, w=w: persistent_forward(x, out, w), dict(num_warps=w))
                for w in (4, 8, 16, 32) if forward_fits(n_cols, dtype, w)]
    if kind == "variants" and dtype is None:  # (the backward's: VARIANTS_BACKWARD)
        return [(f"resident_backward{' per row' if per_row else ''}",
                 (lambda y, dy, out, w=w: backward_per_row(y, dy, out, w)) if per_row else
                 (lambda y, dy, out, w=w: resident_backward(y, dy, out=out, num_warps=w)), dict(num_warps=w))
                for w in (4, 8, 16, 32) if not refusal(probe, probe, probe, w) for per_row in (False, True)]
    if kind == "variants":
        return [(f"persistent_resident{' split' if split else ''}{' per row' if per_row else ''}",
                 lambda x, out, w=w, s=split, r=per_row: persistent_forward(x, out, w, s, r), dict(num_warps=w))
                for w in (8, 16) if forward_fits(n_cols, dtype, w) for split in (False, True)
                for per_row in (False, True)]
    if kind == "lines":
        warps = pick(RESIDENT_BACKWARD[element_size(dtype)], n_cols)
        return [("resident_backward", lambda y, dy, out, w=w, line=line: resident_backward(y, dy, out=out, num_warps=w,
                                                                                        line=line),
                 dict(num_warps=w, line=line)) for w in dict.fromkeys((warps, 32)) for line in (16, 128)
                if not refusal(probe, probe, probe, w, line)]
    return [("before", before, None)] + [
        ("resident_backward", lambda y, dy, out, w=w: resident_backward(y, dy, out=out, num_warps=w), dict(num_warps=w))
        for w in (4, 8, 16, 32) if not refusal(probe, probe, probe, w)]


LINES = [(2048, 50257, BF16), (2048, 50257, F16), (4096, 32001, BF16), (2048, 32768, BF16), (4096, 24577, BF16),
         (8192, 16385, BF16), (4096, 16385, F32), (2048, 28669, F32)]
VARIANTS = [(2048, 32768, BF16), (2048, 50257, BF16), (8192, 16385, BF16)]
VARIANTS_BACKWARD = [(2048, 50257, BF16), (2048, 32768, BF16), (8192, 16385, BF16)]


def cases(kind):
    if kind == "variants":
        return ([(n_rows, n_cols, dtype, candidates(kind, n_cols, dtype), dict(rep_ms=10))
                 for n_rows, n_cols, dtype in VARIANTS] +
                [(n_rows, n_cols, dtype, candidates(kind, n_cols, None), dict(kind="backward", rep_ms=10))
                 for n_rows, n_cols, dtype in VARIANTS_BACKWARD])
    return [(n_rows, n_cols, dtype, candidates(kind, n_cols, dtype))
            for n_rows, n_cols, dtype in {"forward": FORWARD, "lines": LINES}.get(kind, BACKWARD)]


if __name__ == "__main__":
    kind = sys.argv[2]
    bench.sweep(sys.argv[1], cases(kind), "python3 benchmarks/sweeps/persistent_rows.py " + " ".join(sys.argv[1:]),
                kind="backward" if kind in ("backward", "lines") else "forward")
