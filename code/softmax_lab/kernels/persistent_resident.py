"""Persistent resident softmax: one program per multiprocessor keeps a row in shared memory and streams the rows.

``resident.py`` and ``unaligned_resident.py`` give each row its own program; several programs share a
multiprocessor, so one program's copies overlap another's passes. A row of 128 KB (65,536 bf16) fills a
multiprocessor's shared memory alone: then nothing overlaps, and the memory idles while the program makes its
passes, stores its row, ends, and the next program starts copying.

Here the program stays (a persistent grid: as many programs as the GPU holds at once, each taking rows ``pid,
pid + programs, ...``). It copies its row's window in (``cp.async``, whole 16-byte vectors from the one holding
the row's first element, so rows that do not start on 16 bytes are taken too), takes the max of each chunk as it
lands, then the sum of exp, and then stores the row chunk by chunk; as soon as chunk c is stored, chunk c of its
next row is copied into the room it leaves. The next row arrives while this one is stored.

Each thread copies and reads back the same positions of every chunk, so its ``cp.async.wait_group`` is the only
wait between a copy and a read. The row's head and tail pieces (fewer than a vector, sharing their vectors with
the neighbouring rows) are loaded once more from global memory and stored one element at a time.

``persistent_resident_kernel(out_ptr, in_ptr, in_first, in_row_stride, out_first, out_row_stride, n_rows, n_cols,
BLOCK, CHUNK)``: the pointers are rounded down to 16 bytes and ``*_first`` counts the elements from them to row 0;
the output's rows lie like the input's around vectors (the launcher checks).

GPU only (Gluon). The dispatcher takes it where ``tuning.FORWARD`` and ``UNALIGNED_FORWARD`` say (what it
measured: docs/performance.md, "Issue 28, round 7").
"""
import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy as cp

from ._launch import cdiv, check_input, device_limits, device_refusal, prepare
from .cooperative import resident_programs
from .unaligned import windows


@gluon.jit
def window(ptr, first, r, row_stride, VEC: gl.constexpr):
    # Row r's window: the 16-byte vector holding its first element, and `head`, the elements from there to the row.
    start = first + r * row_stride
    return ptr + (start // VEC) * VEC, (start % VEC).to(gl.int32)


@gluon.jit
def persistent_resident_kernel(out_ptr, in_ptr, in_first, in_row_stride, out_first, out_row_stride, n_rows, n_cols,
                               BLOCK: gl.constexpr, CHUNK: gl.constexpr):
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
        for c in gl.static_range(N):  # 5. the row stored chunk by chunk, each chunk's room taken by the next row's
            p = c * CHUNK + cols
            x = room.index(c).load(layout).to(gl.float32)
            y = gl.exp2(x * LOG2E - m_row) * scale
            gl.store(dst + p, y.to(out_ptr.dtype.element_ty), mask=(p >= lo) & (p < hi))
            cp.async_copy_global_to_shared(room.index(c), n_src + p, mask=p < n_reach)
            cp.commit_group()
        y_q = gl.exp2(x_q * LOG2E - m_row) * scale  # 6. the pieces, one element at a time
        gl.store(dst + q, y_q.to(out_ptr.dtype.element_ty), mask=ok)


def shared_room(n_cols: int, element_size: int, num_warps: int) -> tuple[int, int]:
    """(BLOCK, CHUNK): the window's room in shared memory (the row and up to a vector before it), whole chunks of
    one 16-byte vector a thread."""
    chunk = 32 * num_warps * 16 // element_size
    return cdiv(n_cols + 16 // element_size - 1, chunk) * chunk, chunk


def refusal(x: torch.Tensor, y: torch.Tensor | None = None, num_warps: int = 16) -> str:
    """Why this GPU, ``x`` or its output ``y`` (None: a new contiguous one) cannot take the kernel, or ''."""
    if x.device.type != "cuda":
        return "persistent_resident_softmax needs a GPU (a Gluon kernel); use cooperative_softmax"
    block, chunk = shared_room(x.shape[1], x.element_size(), num_warps)
    if block // chunk > 32:
        return (f"persistent_resident_softmax copies at most 32 chunks of {chunk} elements per row at {num_warps} "
                f"warps; this row needs {block // chunk}: use more warps, or cooperative_softmax")
    capability, shared = device_limits(x.device)
    why = device_refusal("persistent_resident_softmax", capability, shared, block * x.element_size())
    if why:
        return why
    got = windows(x, *([] if y is None else [y]))
    if got is None:
        return "persistent_resident_softmax takes rows less than 2**31 elements apart; use cooperative_softmax"
    vec = 16 // x.element_size()
    alike = (x.data_ptr() % 16 == 0 and (x.shape[0] <= 1 or (x.stride(0) - x.shape[1]) % vec == 0)) if y is None \
        else got[2]
    if not alike:
        return ("persistent_resident_softmax needs the output's rows to lie like the input's around 16-byte vectors "
                "(same offset from a vector, row strides alike); use cooperative_softmax")
    return ""


def launch_setup(y, x, num_warps=None):
    """(kernel, grid, args, options) of one launch: as many programs as the GPU holds at once, at most one a row;
    the first two args are the window pointers of y and x."""
    num_warps = num_warps or 16
    (x_base, y_base), (x_first, y_first), _ = windows(x, y)
    BLOCK, chunk = shared_room(x.shape[1], x.element_size(), num_warps)
    args = (y_base, x_base, x_first, x.stride(0), y_first, y.stride(0), *x.shape)
    options = dict(BLOCK=BLOCK, CHUNK=chunk, num_warps=num_warps)
    at_once = resident_programs(persistent_resident_kernel, args, (1,), x.device, **options)
    return persistent_resident_kernel, (max(1, min(x.shape[0], at_once)),), args, options


def persistent_resident_softmax(x: torch.Tensor, out: torch.Tensor | None = None,
                                num_warps: int | None = None) -> torch.Tensor:
    """Softmax over the last dim of 2-D ``x`` (GPU; the row's window must fit one program's shared memory in at
    most 32 chunks of one vector a thread; the output's rows must lie like the input's around 16-byte vectors).
    Knob: ``num_warps`` (default 16)."""
    check_input(x)
    x, y = prepare(x, out, num_warps=num_warps)
    if x.numel() == 0:
        return y
    why = refusal(x, y, num_warps or 16)
    if why:
        raise ValueError(why)
    kernel, grid, args, options = launch_setup(y, x, num_warps)
    kernel[grid](*args, **options)
    return y
