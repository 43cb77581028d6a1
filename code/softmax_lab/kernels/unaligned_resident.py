"""Resident softmax for rows that do not start on 16 bytes: the row's window waits in shared memory.

``resident.py`` keeps a row in shared memory so that several programs share a multiprocessor, but it copies whole
16-byte vectors from the row's first element, so it refuses rows that do not start on 16 bytes (a bf16 row of
50,257 elements: row r starts 2r mod 16 bytes past a vector boundary). This kernel copies the row's window
instead, as ``unaligned.py`` loads it: the vectors from the one holding the row's first element to the one holding
its last (``cp.async``, 16 bytes at a time; the first and last vector also hold neighbouring rows' elements,
copied, never used). The max and sum passes skip positions outside the row; the store pass writes the whole
vectors inside the row 16 bytes at a time, and the row's head and tail pieces (fewer than VEC elements each,
loaded once more from global memory at the start) one element at a time.

Where the window starts in shared memory is ``LINE``: on the 16-byte vector before the row, or on the 128-byte
line before it (``line=128``). A warp copies 512 contiguous bytes at a time; from a line boundary, those are 4
whole 128-byte lines, from anywhere else they touch 5. The row's copies and stores do not change, only how
they fall on lines: 2048×50257 bf16 ran at 88.0% of copy from lines, 86.0 from vectors (docs/performance.md).

``unaligned_resident_kernel(out_ptr, in_ptr, in_first, in_row_stride, out_first, out_row_stride, n_cols, BLOCK,
CHUNK, LINE=16, ONLINE=False)``: one program per row; the pointers are rounded down to 16 bytes and ``*_first``
counts the elements from them to row 0; the output's rows must lie like the input's around vectors (the launcher
checks; around lines they may lie otherwise: then only the input's copies fall on whole lines); ONLINE: the sum
taken with the max as each chunk lands (``chunk_state.py``), so no pass of its own.

GPU only (Gluon). The dispatcher takes it for 16-bit windows of 1,032-57,344 positions and fp32 windows of
16,385-57,344 (``tuning.UNALIGNED_FORWARD``; what it measured: ``docs/performance.md``).
"""
import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy as cp

from . import chunk_state
from ._launch import cdiv, device_refusal, device_limits, prepare, check_input
from .unaligned import vector_of, windows

LINES = (16, 32, 64, 128)  # where a row's window may start: on 16 bytes (its vector) up to a 128-byte cache line


@gluon.jit
def window_sum(window, m_row, head, n_cols, layout: gl.constexpr):
    """The sum of exp(x - m_row) over the row's elements in its window (``[chunks, CHUNK]``; the row from ``head``)."""
    N: gl.constexpr = window.shape[0]
    CHUNK: gl.constexpr = window.shape[1]
    cols = gl.arange(0, CHUNK, layout=layout)
    total = gl.zeros([CHUNK], gl.float32, layout)
    for c in range(N):
        x = window.index(c).load(layout).to(gl.float32)
        inside = (c * CHUNK + cols - head).to(gl.uint32) < n_cols
        total += gl.where(inside, chunk_state.exp_minus(x, m_row), 0.0)
    return gl.sum(total, axis=0)


@gluon.jit
def unaligned_resident_kernel(out_ptr, in_ptr, in_first, in_row_stride, out_first, out_row_stride, n_cols,
                              BLOCK: gl.constexpr, CHUNK: gl.constexpr, LINE: gl.constexpr = 16,
                              ONLINE: gl.constexpr = False):
    VEC: gl.constexpr = 128 // in_ptr.dtype.element_ty.primitive_bitwidth  # elements per 16 bytes
    layout: gl.constexpr = gl.BlockedLayout([VEC], [32], [gl.num_warps()], [0])  # one vector a thread
    one: gl.constexpr = gl.BlockedLayout([1], [32], [gl.num_warps()], [0])  # the head and tail pieces
    N: gl.constexpr = BLOCK // CHUNK
    window = gl.allocate_shared_memory(in_ptr.dtype.element_ty, [N, CHUNK], gl.SwizzledSharedLayout(1, 1, 1, [0]))
    A: gl.constexpr = LINE // (16 // VEC)  # the window starts on a LINE-byte boundary: A elements
    row = gl.program_id(0).to(gl.int64)
    # (elements from the LINE-byte boundary before in_ptr to it: a whole number of vectors, in_ptr is on 16 bytes)
    lead = ((in_ptr.to(gl.int64, bitcast=True) % LINE) // 16) * VEC
    start = in_first + row * in_row_stride
    base = ((start + lead) // A) * A - lead  # the LINE-byte boundary at or before the row's first element
    head = (start - base).to(gl.int32)  # the row is window positions [head, end)
    end = head + n_cols
    first_v = (head // VEC) * VEC  # from the vector holding the row's first element...
    reach = ((end + VEC - 1) // VEC) * VEC  # ...up to the vector holding its last element
    src = in_ptr + base
    cols = gl.arange(0, CHUNK, layout=layout)
    for c in gl.static_range(N):  # 1. the window on its way, a commit group per chunk
        p = c * CHUNK + cols
        cp.async_copy_global_to_shared(window.index(c), src + p, mask=(p >= first_v) & (p < reach))
        cp.commit_group()
    # The head and tail pieces, [head, lo) and [max(hi, lo), end), loaded again now so that the loads overlap.
    lo, hi = ((head + VEC - 1) // VEC) * VEC, (end // VEC) * VEC  # the whole vectors inside the row: [lo, hi)
    j = gl.arange(0, 2 * VEC, layout=one)
    q = gl.where(j < VEC, first_v + j, hi + j - VEC)
    ok = (q >= head) & (q < end) & gl.where(j < VEC, q < lo, q >= lo)
    x_q = gl.load(src + q, mask=ok, other=0.0).to(gl.float32)
    m = gl.full([CHUNK], float("-inf"), gl.float32, layout)
    m_t, l_t = chunk_state.start(CHUNK, VEC)
    for c in gl.static_range(N):  # 2. the max of each chunk as soon as it lands (positions outside the row: -inf)
        cp.wait_group(N - 1 - c)  # (each thread reads back only what it copied)
        x = window.index(c).load(layout).to(gl.float32)
        inside = (c * CHUNK + cols - head).to(gl.uint32) < n_cols
        x = gl.where(inside, x, float("-inf"))
        if ONLINE:  # the sum too, as the chunks land (chunk_state.py)
            m_t, l_t = chunk_state.fold(m_t, l_t, x, VEC)
        else:
            m = gl.maximum(m, x)
    if ONLINE:
        m_row, total, far = chunk_state.finish(m_t, l_t)
        if far:  # a row far from 0: the sum again, from x - max (chunk_state.py)
            total = window_sum(window, m_row, head, n_cols, layout)
    else:
        m_row = gl.max(m, axis=0)
        total = window_sum(window, m_row, head, n_cols, layout)  # 3. the sum of exp(x - max)
    log2_scale = -gl.log2(total)  # (y = exp(x - max) / total)
    out_start = out_first + row * out_row_stride
    dst = out_ptr + ((out_start - head) // VEC) * VEC  # window position 0 (the output's rows lie like the input's
    # around vectors: out_start - head is a whole number of vectors)
    for c in range(N):  # 4. the whole vectors inside the row, 16 bytes at a time
        x = window.index(c).load(layout).to(gl.float32)
        p = c * CHUNK + cols
        y = chunk_state.exp_minus_times(x, m_row, log2_scale)
        gl.store(dst + p, y.to(out_ptr.dtype.element_ty), mask=(p >= lo) & (p < hi))
    y_q = chunk_state.exp_minus_times(x_q, m_row, log2_scale)  # 5. the pieces, one element at a time
    gl.store(dst + q, y_q.to(out_ptr.dtype.element_ty), mask=ok)


def shared_window(n_cols: int, element_size: int, num_warps: int, line: int = 16) -> tuple[int, int]:
    """(BLOCK, CHUNK): the window's room in shared memory (the row and up to a ``line`` of bytes before it),
    whole chunks of one 16-byte vector a thread."""
    chunk = 32 * num_warps * 16 // element_size
    return cdiv(n_cols + line // element_size - 1, chunk) * chunk, chunk


def refusal(x: torch.Tensor, y: torch.Tensor | None = None, num_warps: int = 8, line: int = 16,
            online: bool = False) -> str:
    """Why this GPU, ``x`` or its output ``y`` (None: a new contiguous one) cannot take the kernel, or ''."""
    if x.device.type != "cuda":
        return "unaligned_resident_softmax needs a GPU (a Gluon kernel); use unaligned_cooperative_softmax"
    if line not in LINES:
        return f"line must be one of {LINES} (bytes: where each row's window starts), got {line!r}"
    block, chunk = shared_window(x.shape[1], x.element_size(), num_warps, line)
    if block // chunk > 32:
        return (f"unaligned_resident_softmax copies at most 32 chunks of {chunk} elements per row at {num_warps} "
                f"warps; this row needs {block // chunk}: use more warps, or unaligned_cooperative_softmax")
    capability, shared = device_limits(x.device)
    why = device_refusal("unaligned_resident_softmax", capability, shared, block * x.element_size())
    if why:
        return why
    got = windows(x, *([] if y is None else [y]))
    if got is None or vector_of(x) == 1:
        return ("unaligned_resident_softmax takes rows less than 2**31 elements apart; use "
                "unaligned_cooperative_softmax")
    vec = vector_of(x)
    if y is None:  # a new output: it starts on 16 bytes, its rows n_cols apart
        alike = x.data_ptr() % 16 == 0 and (x.shape[0] <= 1 or (x.stride(0) - x.shape[1]) % vec == 0)
    else:
        alike = got[2]
    if not alike:
        return ("unaligned_resident_softmax needs the output's rows to lie like the input's around 16-byte vectors "
                "(same offset from a vector, row strides alike); use unaligned_cooperative_softmax")
    return ""


def launch_setup(y, x, num_warps=None, line=None, online=False):
    """(kernel, grid, args, options) of one launch; the first two args are the window pointers of y and x."""
    num_warps, line = num_warps or 8, 16 if line is None else line
    (x_base, y_base), (x_first, y_first), _ = windows(x, y)
    BLOCK, chunk = shared_window(x.shape[1], x.element_size(), num_warps, line)
    args = (y_base, x_base, x_first, x.stride(0), y_first, y.stride(0), x.shape[1])
    options = dict(BLOCK=BLOCK, CHUNK=chunk, LINE=line, ONLINE=bool(online), num_warps=num_warps)
    return unaligned_resident_kernel, (x.shape[0],), args, options


def unaligned_resident_softmax(x: torch.Tensor, out: torch.Tensor | None = None,
                               num_warps: int | None = None, line: int | None = None,
                               online: bool = False) -> torch.Tensor:
    """Softmax over the last dim of 2-D ``x`` whose rows need not start on 16 bytes (GPU; the row's window must
    fit one program's shared memory in at most 32 chunks of one vector a thread; the output's rows must lie like
    the input's around 16-byte vectors). Knobs: ``num_warps`` (default 8); ``line`` (bytes: 16, the default, starts
    each row's window on the vector before it; 32, 64 or 128 on the line of that size before it); ``online``
    (the sum taken with the max as the chunks land: ``chunk_state.py``; default: a pass of its own)."""
    check_input(x)
    x, y = prepare(x, out, num_warps=num_warps)
    if x.numel() == 0:
        return y
    why = refusal(x, y, num_warps or 8, 16 if line is None else line)
    if why:
        raise ValueError(why)
    kernel, grid, args, options = launch_setup(y, x, num_warps, line, online)
    kernel[grid](*args, **options)
    return y
