"""Resident backward: a row's y and dy wait in shared memory, and each program works through many rows.

dx = y·(dy - Σ dy·y) reads y and dy once and writes dx once, if the whole row of both stays on chip between the
dot and the store. Past 16,384 elements a row no longer fits registers, so ``backward.py`` shares it out to
cooperating programs, and rows that do not start on 16 bytes (2048×50257 bf16) ran at 67% of copy there.

Here one program copies the row's windows of y and dy into shared memory (``cp.async``, whole 16-byte vectors
from the one holding the row's first element, as ``unaligned_resident.py`` does for the forward), takes Σ dy·y
chunk by chunk as the chunks land, then writes dx. A 50,257-element bf16 row needs 200 KB for the two windows, so
one program fills a multiprocessor, and a program that finished its row before loading the next would leave the
memory idle. So the program stays (a persistent grid: as many programs as the GPU holds at once, each taking
rows ``pid, pid + programs, ...``), and as soon as it has written chunk c of dx it copies chunk c of its next
row into the room that chunk leaves. The next row arrives while this one is stored. (How much that buys over one
program a row has not been measured; the same form lost for the forward: docs/performance.md.)

Each thread copies and reads back the same positions of every chunk, so its own ``cp.async.wait_group`` is
what it waits on before a read (the compiler still puts a barrier beside each wait and each copy, as it cannot
tell the chunks of one buffer apart). The row's head and tail pieces (fewer than a vector,
sharing their vectors with the neighbouring rows) are loaded from global memory once more and stored one
element at a time; the whole vectors inside the row are stored 16 bytes at a time.

``resident_backward_kernel(dx_ptr, y_ptr, dy_ptr, first, y_row_stride, dy_row_stride, dx_row_stride, n_rows,
n_cols, BLOCK, CHUNK, LINE=16)``: the pointers are rounded down to 16 bytes and ``first`` counts the elements from
them to row 0; y, dy and dx lie alike around vectors (same ``first``, row strides alike modulo the vector). The
windows start on the LINE-byte boundary before the row (16: its vector; 128: its cache line, where y and dy lie
alike around lines, so that a warp's copies fill whole lines, as ``unaligned_resident.py``'s do).

GPU only (Gluon). ``softmax_backward`` (``backward.launch_setup``) takes it where ``tuning.RESIDENT_BACKWARD`` says
(what it measured: docs/performance.md, "Issue 28, round 7").
"""
import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy as cp

from ._launch import backward_inputs, cdiv, check_knobs, device_limits, device_refusal
from .cooperative import resident_programs
from .unaligned import windows


@gluon.jit
def copy_chunk(y_win, dy_win, c: gl.constexpr, y_src, dy_src, p, start, reach):
    # Chunk c of a row's two windows on its way, [start, reach): one commit group (positions outside: zeros, unread).
    cp.async_copy_global_to_shared(y_win.index(c), y_src + p, mask=(p >= start) & (p < reach))
    cp.async_copy_global_to_shared(dy_win.index(c), dy_src + p, mask=(p >= start) & (p < reach))
    cp.commit_group()


@gluon.jit
def window(y_ptr, dy_ptr, dx_ptr, first, r, y_row_stride, dy_row_stride, dx_row_stride, VEC: gl.constexpr,
           LINE: gl.constexpr):
    # Row r's windows in y, dy and dx, from the LINE-byte boundary at or before its first element, and `head`, the
    # elements from there to the row: the same in all three (y and dy lie alike around LINE bytes, dx around 16).
    A: gl.constexpr = LINE // (16 // VEC)  # elements per LINE bytes
    y_lead = ((y_ptr.to(gl.int64, bitcast=True) % LINE) // 16) * VEC  # from the line before y_ptr to it
    dy_lead = ((dy_ptr.to(gl.int64, bitcast=True) % LINE) // 16) * VEC
    start = first + r * y_row_stride
    y_base = ((start + y_lead) // A) * A - y_lead
    head = (start - y_base).to(gl.int32)
    dy_base = ((first + r * dy_row_stride + dy_lead) // A) * A - dy_lead
    dx_base = ((first + r * dx_row_stride - head) // VEC) * VEC  # (a whole number of vectors already)
    return y_ptr + y_base, dy_ptr + dy_base, dx_ptr + dx_base, head


@gluon.jit
def resident_backward_kernel(dx_ptr, y_ptr, dy_ptr, first, y_row_stride, dy_row_stride, dx_row_stride, n_rows,
                             n_cols, BLOCK: gl.constexpr, CHUNK: gl.constexpr, LINE: gl.constexpr = 16):
    VEC: gl.constexpr = 128 // y_ptr.dtype.element_ty.primitive_bitwidth  # elements per 16 bytes
    layout: gl.constexpr = gl.BlockedLayout([VEC], [32], [gl.num_warps()], [0])  # one vector a thread
    one: gl.constexpr = gl.BlockedLayout([1], [32], [gl.num_warps()], [0])  # the head and tail pieces
    N: gl.constexpr = BLOCK // CHUNK
    plain: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0])
    y_win = gl.allocate_shared_memory(y_ptr.dtype.element_ty, [N, CHUNK], plain)
    dy_win = gl.allocate_shared_memory(dy_ptr.dtype.element_ty, [N, CHUNK], plain)
    cols = gl.arange(0, CHUNK, layout=layout)
    j = gl.arange(0, 2 * VEC, layout=one)
    programs = gl.num_programs(0)
    row = gl.program_id(0).to(gl.int64)
    # Row r's window starts on the LINE-byte boundary before it, `head` elements before its first element; the
    # copies start at the vector holding that element (nothing before the row's own vectors is read).
    y_src, dy_src, dx_dst, head = window(y_ptr, dy_ptr, dx_ptr, first, row, y_row_stride, dy_row_stride,
                                         dx_row_stride, VEC, LINE)
    reach = gl.where(row < n_rows, ((head + n_cols + VEC - 1) // VEC) * VEC, 0)  # (past the last row: nothing)
    for c in gl.static_range(N):  # 1. the first row's windows on their way
        copy_chunk(y_win, dy_win, c, y_src, dy_src, c * CHUNK + cols, (head // VEC) * VEC, reach)
    for r in range(row, n_rows, programs):
        y_src, dy_src, dst, head = window(y_ptr, dy_ptr, dx_ptr, first, r, y_row_stride, dy_row_stride,
                                          dx_row_stride, VEC, LINE)
        end = head + n_cols  # the row is window positions [head, end)
        lo, hi = ((head + VEC - 1) // VEC) * VEC, (end // VEC) * VEC  # the whole vectors inside it: [lo, hi)
        # 2. the head and tail pieces, [head, lo) and [max(hi, lo), end)
        q = gl.where(j < VEC, (head // VEC) * VEC + j, hi + j - VEC)
        ok = (q >= head) & (q < end) & gl.where(j < VEC, q < lo, q >= lo)
        y_q = gl.load(y_src + q, mask=ok, other=0.0).to(gl.float32)
        dy_q = gl.load(dy_src + q, mask=ok, other=0.0).to(gl.float32)
        acc = gl.zeros([CHUNK], gl.float32, layout)
        for c in gl.static_range(N):  # 3. Σ dy·y, each chunk as soon as it lands
            cp.wait_group(N - 1 - c)
            y = y_win.index(c).load(layout).to(gl.float32)
            dy = dy_win.index(c).load(layout).to(gl.float32)
            inside = (c * CHUNK + cols - head).to(gl.uint32) < n_cols
            acc += gl.where(inside, y * dy, 0.0)
        dot = gl.sum(acc, axis=0)
        nxt = r + programs  # 4. dx chunk by chunk, each chunk's room then taken by the next row's chunk
        n_y_src, n_dy_src, _, n_head = window(y_ptr, dy_ptr, dx_ptr, first, nxt, y_row_stride, dy_row_stride,
                                              dx_row_stride, VEC, LINE)
        n_reach = gl.where(nxt < n_rows, ((n_head + n_cols + VEC - 1) // VEC) * VEC, 0)
        for c in gl.static_range(N):
            p = c * CHUNK + cols
            y = y_win.index(c).load(layout).to(gl.float32)
            dy = dy_win.index(c).load(layout).to(gl.float32)
            gl.store(dst + p, (y * (dy - dot)).to(dx_ptr.dtype.element_ty), mask=(p >= lo) & (p < hi))
            copy_chunk(y_win, dy_win, c, n_y_src, n_dy_src, p, (n_head // VEC) * VEC, n_reach)
        gl.store(dst + q, (y_q * (dy_q - dot)).to(dx_ptr.dtype.element_ty), mask=ok)  # 5. the pieces
    cp.wait_group(0)  # (the last row's empty copy groups)


LINES = (16, 32, 64, 128)  # where a row's windows may start: on 16 bytes (its vector) up to a 128-byte cache line


def shared_windows(n_cols: int, element_size: int, num_warps: int, line: int = 16) -> tuple[int, int]:
    """(BLOCK, CHUNK): each window's room in shared memory (the row and up to a ``line`` of bytes before it), whole
    chunks of one 16-byte vector a thread."""
    chunk = 32 * num_warps * 16 // element_size
    return cdiv(n_cols + line // element_size - 1, chunk) * chunk, chunk


def refusal(y: torch.Tensor, dy: torch.Tensor, dx: torch.Tensor, num_warps: int = 8, line: int = 16) -> str:
    """Why this GPU or these tensors cannot take the kernel, or ''."""
    if y.device.type != "cuda":
        return "resident_backward needs a GPU (a Gluon kernel); use softmax_backward"
    if line not in LINES:
        return f"line must be one of {LINES} (bytes: where each row's windows start), got {line!r}"
    if not y.dtype == dy.dtype == dx.dtype:
        return (f"resident_backward takes y, dy and dx of one dtype (its windows share one layout); got {y.dtype}, "
                f"{dy.dtype} and {dx.dtype}: use softmax_backward")
    block, chunk = shared_windows(y.shape[1], y.element_size(), num_warps, line)
    if block // chunk > 32:
        return (f"resident_backward copies at most 32 chunks of {chunk} elements per row at {num_warps} warps; this "
                f"row needs {block // chunk}: use more warps, or softmax_backward")
    capability, shared = device_limits(y.device)
    why = device_refusal("resident_backward", capability, shared, 2 * block * y.element_size())
    if why:
        return why
    got = windows(y, dy, dx)
    if got is None or not got[2]:
        return ("resident_backward needs y, dy and dx whose rows lie alike around 16-byte vectors (same offset from "
                "a vector, row strides alike), less than 2**31 elements apart; use softmax_backward")
    apart = (y.data_ptr() - dy.data_ptr()) % line or (y.shape[0] > 1 and (y.stride(0) - dy.stride(0))
                                                         * y.element_size() % line)
    if apart:
        return (f"resident_backward with line={line} needs y and dy whose rows lie alike around {line}-byte lines "
                "(same offset from a line, row strides alike); use line=16")
    return ""


def launch_setup(dx, y, dy, num_warps=None, line=None):
    """(kernel, grid, args, options) of one launch: as many programs as the GPU holds at once, at most one a row;
    ``args[0:3]`` are the window pointers of dx, y and dy."""
    num_warps, line = num_warps or 8, line or 16
    (y_base, dy_base, dx_base), (first, _, _), _ = windows(y, dy, dx)
    BLOCK, chunk = shared_windows(y.shape[1], y.element_size(), num_warps, line)
    args = (dx_base, y_base, dy_base, first, y.stride(0), dy.stride(0), dx.stride(0), *y.shape)
    options = dict(BLOCK=BLOCK, CHUNK=chunk, LINE=line, num_warps=num_warps)
    at_once = resident_programs(resident_backward_kernel, args, (1,), y.device, **options)
    return resident_backward_kernel, (max(1, min(y.shape[0], at_once)),), args, options


def resident_backward(y: torch.Tensor, dy: torch.Tensor, out: torch.Tensor | None = None,
                      num_warps: int | None = None, line: int | None = None) -> torch.Tensor:
    """dx = y·(dy - Σ dy·y) over the last dim of 2-D ``y`` and ``dy`` (GPU; the windows of y and dy must fit one
    program's shared memory in at most 32 chunks of one vector a thread; y, dy and the output's rows must lie
    alike around 16-byte vectors). Knobs: ``num_warps`` (default 8); ``line`` (bytes: 16, the default, starts each
    row's windows on the vector before it; 32, 64 or 128 on the line of that size before it, where y and dy lie
    alike around such lines)."""
    check_knobs(num_warps=num_warps)
    if line is not None and line not in LINES:
        raise ValueError(f"line must be one of {LINES} (bytes: where each row's windows start), got {line!r}")
    y, dy, dx = backward_inputs(y, dy, out)
    if y.numel() == 0:
        return dx
    why = refusal(y, dy, dx, num_warps or 8, line or 16)
    if why:
        raise ValueError(why)
    kernel, grid, args, options = launch_setup(dx, y, dy, num_warps, line)
    kernel[grid](*args, **options)
    return dx
