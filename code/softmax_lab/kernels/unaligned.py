"""Rows that do not start on 16 bytes (odd widths, odd strides): an aligned body and a masked head and tail.

A row of 50,257 bf16 elements is not a whole number of 16-byte vectors, so row 1 starts 2 bytes past a vector
boundary, row 2 4 bytes past, and so on. The register kernels (``fused``, ``multirow``, ``cooperative``, the
backward tile) then load and store one element at a time: the compiler cannot prove any wider access lands on
a vector boundary (chapter 7, ``_launch.row_vector``).

These kernels read each row from the vector boundary just before it instead: position ``p`` of the window
is element ``p - head`` of the row (``head``: the elements of the first vector that precede the row, 0 to
VEC - 1). Every window starts on 16 bytes, so the loads are whole 16-byte vectors, masked by whole vectors
(the first and last vector also hold elements of the neighbouring rows: they are read, never used).

Stores may not touch the neighbours, so they come in three parts: the whole vectors inside the row
(``body``, 16 bytes at a time), and the few elements before the first whole vector and after the last one
(``pieces``: the head and the tail, fewer than VEC each), which are loaded a second time with the row (so
that the loads overlap), computed as the body is, and stored one element at a time. When the output's rows lie
differently around vectors than the input's (``SAME_HEADS`` False: a strided view into a wider tensor), the
whole output is stored element by element; the loads stay wide.

The launchers pass a pointer rounded down to 16 bytes and ``*_first``, the elements from it to row 0.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._launch import cdiv, default_num_warps, next_power_of_2, prepare, row_vector, scratch
from .combine import safe_shift
from .cooperative import (run_setup, count_in_and_wait, default_block, default_warps, fits, row_state,
                          take_ticket)
from .fast_exp import fast_exp
from .tuning import BACKWARD_TILE, BACKWARD_TILE_COLS, COOPERATIVE_BACKWARD_BYTES, UNALIGNED_BACKWARD

MAX_COLS = 65536  # the tile kernels hold whole rows in registers; the cooperative ones take any length


@triton.jit
def whole(n, VEC: tl.constexpr):
    """``n`` rounded down to whole vectors (the compiler sees a product by VEC: a multiple of VEC)."""
    return (n // VEC) * VEC


@triton.jit
def row_window(first, row, row_stride, n_cols, VEC: tl.constexpr):
    """Where a row's window starts (a whole vector) and where the row lies in it: ``(base, head, end)``."""
    start = first + row * row_stride
    base = whole(start, VEC)
    head = (start - base).to(tl.int32)  # (32-bit: half the compares of 64-bit positions)
    return base, head, head + n_cols


@triton.jit
def in_row(p, head, n_cols):
    """Which window positions ``p`` hold the row's elements: ``head <= p < head + n_cols``, one compare."""
    return (p - head).to(tl.uint32) < n_cols


@triton.jit
def pieces(head, end, VEC: tl.constexpr):
    """The row's head and tail pieces, in one block of 2·VEC window positions: ``(positions, which to store)``.
    Head: [head, lo), the row's elements before its first whole vector; tail: [max(hi, lo), end), after its last
    one (a row inside one vector is all head). ``head`` and ``end`` are scalars or [ROWS, 1] columns."""
    lo, hi = whole(head + VEC - 1, VEC), whole(end, VEC)  # the whole vectors inside the row: [lo, hi)
    j = tl.arange(0, 2 * VEC)
    if len(head.shape) == 2:
        j = j[None, :]
    q = tl.where(j < VEC, j, hi + j - VEC)
    ok = (q >= head) & (q < end) & tl.where(j < VEC, q < lo, q >= lo)
    return q, ok


@triton.jit
def body(p, head, end, VEC: tl.constexpr):
    """Which window positions ``p`` are whole vectors inside the row (stored 16 bytes at a time)."""
    return (p >= whole(head + VEC - 1, VEC)) & (p < whole(end, VEC))


@triton.jit
def unaligned_softmax_kernel(out_ptr, in_ptr, in_first, in_row_stride, out_first, out_row_stride, n_rows, n_cols,
                             ROWS: tl.constexpr, BLOCK: tl.constexpr, VEC: tl.constexpr, SAME_HEADS: tl.constexpr):
    # ROWS rows per program, each in a window of BLOCK >= n_cols + VEC - 1 positions.
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    live = (rows < n_rows)[:, None]
    base, head, end = row_window(in_first, rows, in_row_stride, n_cols, VEC)
    base, head, end = base[:, None], head[:, None], end[:, None]
    p = tl.arange(0, BLOCK)[None, :]
    # 1. Load whole vectors (up to the one holding the row's last element); positions outside the row: -inf.
    #    The head and tail pieces are loaded again now, so that their loads overlap the others.
    x = tl.load(in_ptr + base + p, mask=live & (p < whole(end + VEC - 1, VEC)), other=float("-inf"))
    if SAME_HEADS:
        q, ok = pieces(head, end, VEC)
        ok = ok & live
        x_q = tl.load(in_ptr + base + q, mask=ok, other=0.0).to(tl.float32)
    inside = in_row(p, head, n_cols)
    x = tl.where(inside, x.to(tl.float32), float("-inf"))
    x = tl.where(live, x, 0.0)  # rows past the end: 0, not all -inf (no NaN); never stored
    # 2. Softmax of every row, as in multirow.
    m = tl.max(x, axis=1)[:, None]
    e = fast_exp(x - m)
    scale = (1.0 / tl.sum(e, axis=1))[:, None]
    y = (e * scale).to(out_ptr.dtype.element_ty)
    # 3. Store.
    out_start = out_first + rows[:, None] * out_row_stride
    if SAME_HEADS:  # the output's rows lie like the input's: whole vectors, then the head and tail pieces
        out_base = whole(out_start, VEC)
        tl.store(out_ptr + out_base + p, y, mask=live & body(p, head, end, VEC))
        tl.store(out_ptr + out_base + q, (fast_exp(x_q - m) * scale).to(out_ptr.dtype.element_ty), mask=ok)
    else:  # element by element
        tl.store(out_ptr + (out_start - head) + p, y, mask=live & inside)


@triton.jit
def unaligned_cooperative_kernel(out_ptr, in_ptr, pair_ptr, count_ptr, in_first, in_row_stride, out_first,
                                 out_row_stride, n_cols, n_chunks, BLOCK: tl.constexpr, CHUNKS: tl.constexpr,
                                 PUBLISH: tl.constexpr, FINISH: tl.constexpr, VEC: tl.constexpr,
                                 SAME_HEADS: tl.constexpr):
    # cooperative.py's kernel (TILES = 1) over windows: chunk c holds window positions [c * BLOCK, (c+1) * BLOCK).
    t = take_ticket(count_ptr, PUBLISH and FINISH)
    row = (t // n_chunks).to(tl.int64)
    chunk = t % n_chunks
    base, head, end = row_window(in_first, row, in_row_stride, n_cols, VEC)
    first = tl.multiple_of(chunk * BLOCK, BLOCK)
    p = first + tl.arange(0, BLOCK)
    x = tl.load(in_ptr + base + p, mask=p < whole(end + VEC - 1, VEC), other=float("-inf"))
    if SAME_HEADS and FINISH:
        q, ok = pieces(head, end, VEC)
        ok = ok & (q >= first) & (q < first + BLOCK)  # the pieces in this chunk
        x_q = tl.load(in_ptr + base + q, mask=ok, other=0.0).to(tl.float32)
    inside = in_row(p, head, n_cols)
    x = tl.where(inside, x.to(tl.float32), float("-inf"))
    m_t = tl.max(x, axis=0)  # -inf for a chunk with no element of the row (its e is 0, its l 0)
    shift = safe_shift(m_t)
    e = fast_exp(x - shift)
    pair = pair_ptr + 2 * (row * n_chunks + chunk)
    if PUBLISH:
        tl.store(pair, m_t)
        tl.store(pair + 1, tl.sum(e, axis=0))
    count_in_and_wait(count_ptr + 1 + row, n_chunks, PUBLISH, FINISH)
    if FINISH:
        row_max, inv_total = row_state(pair_ptr, row, n_chunks, CHUNKS)
        scale = tl.exp(m_t - row_max) * inv_total
        y = (e * scale).to(out_ptr.dtype.element_ty)
        out_start = out_first + row * out_row_stride
        if SAME_HEADS:
            out_base = whole(out_start, VEC)
            tl.store(out_ptr + out_base + p, y, mask=body(p, head, end, VEC))
            tl.store(out_ptr + out_base + q, (fast_exp(x_q - shift) * scale).to(out_ptr.dtype.element_ty), mask=ok)
        else:
            tl.store(out_ptr + (out_start - head) + p, y, mask=inside)


@triton.jit
def unaligned_backward_kernel(dx_ptr, y_ptr, dy_ptr, first, y_row_stride, dy_row_stride, dx_row_stride, n_rows,
                              n_cols, ROWS: tl.constexpr, BLOCK: tl.constexpr, VEC: tl.constexpr):
    # dx = y·(dy - Σ dy·y) over windows; y, dy and dx lie alike around vectors (same first, strides alike).
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    live = rows[:, None] < n_rows
    y_base, head, end = row_window(first, rows, y_row_stride, n_cols, VEC)
    dy_base = whole(first + rows * dy_row_stride, VEC)[:, None]
    dx_base = whole(first + rows * dx_row_stride, VEC)[:, None]
    y_base, head, end = y_base[:, None], head[:, None], end[:, None]
    p = tl.arange(0, BLOCK)[None, :]
    reach = live & (p < whole(end + VEC - 1, VEC))
    y = tl.load(y_ptr + y_base + p, mask=reach, other=0.0)
    dy = tl.load(dy_ptr + dy_base + p, mask=reach, other=0.0)
    q, ok = pieces(head, end, VEC)
    ok = ok & live
    y_q = tl.load(y_ptr + y_base + q, mask=ok, other=0.0).to(tl.float32)
    dy_q = tl.load(dy_ptr + dy_base + q, mask=ok, other=0.0).to(tl.float32)
    inside = in_row(p, head, n_cols) & live
    y = tl.where(inside, y.to(tl.float32), 0.0)
    dy = tl.where(inside, dy.to(tl.float32), 0.0)
    dot = tl.sum(dy * y, axis=1)[:, None]
    tl.store(dx_ptr + dx_base + p, (y * (dy - dot)).to(dx_ptr.dtype.element_ty), mask=live & body(p, head, end, VEC))
    tl.store(dx_ptr + dx_base + q, (y_q * (dy_q - dot)).to(dx_ptr.dtype.element_ty), mask=ok)


@triton.jit
def unaligned_cooperative_backward_kernel(dx_ptr, y_ptr, dy_ptr, dot_ptr, count_ptr, first, y_row_stride,
                                          dy_row_stride, dx_row_stride, n_cols, n_chunks, BLOCK: tl.constexpr,
                                          CHUNKS: tl.constexpr, PUBLISH: tl.constexpr, FINISH: tl.constexpr,
                                          VEC: tl.constexpr):
    t = take_ticket(count_ptr, PUBLISH and FINISH)
    row = (t // n_chunks).to(tl.int64)
    chunk = t % n_chunks
    y_base, head, end = row_window(first, row, y_row_stride, n_cols, VEC)
    dy_base, dx_base = whole(first + row * dy_row_stride, VEC), whole(first + row * dx_row_stride, VEC)
    start = tl.multiple_of(chunk * BLOCK, BLOCK)
    p = start + tl.arange(0, BLOCK)
    reach = p < whole(end + VEC - 1, VEC)
    y = tl.load(y_ptr + y_base + p, mask=reach, other=0.0)
    dy = tl.load(dy_ptr + dy_base + p, mask=reach, other=0.0)
    if FINISH:
        q, ok = pieces(head, end, VEC)
        ok = ok & (q >= start) & (q < start + BLOCK)
        y_q = tl.load(y_ptr + y_base + q, mask=ok, other=0.0).to(tl.float32)
        dy_q = tl.load(dy_ptr + dy_base + q, mask=ok, other=0.0).to(tl.float32)
    inside = in_row(p, head, n_cols)
    y = tl.where(inside, y.to(tl.float32), 0.0)
    dy = tl.where(inside, dy.to(tl.float32), 0.0)
    if PUBLISH:
        tl.store(dot_ptr + row * n_chunks + chunk, tl.sum(dy * y, axis=0))
    count_in_and_wait(count_ptr + 1 + row, n_chunks, PUBLISH, FINISH)
    if FINISH:
        c = tl.arange(0, CHUNKS)
        dot = tl.sum(tl.load(dot_ptr + row * n_chunks + c, mask=c < n_chunks, other=0.0, volatile=True), axis=0)
        tl.store(dx_ptr + dx_base + p, (y * (dy - dot)).to(dx_ptr.dtype.element_ty), mask=body(p, head, end, VEC))
        tl.store(dx_ptr + dx_base + q, (y_q * (dy_q - dot)).to(dx_ptr.dtype.element_ty), mask=ok)


# --- Launchers -------------------------------------------------------------------------------------------------


def vector_of(t: torch.Tensor) -> int:
    """Elements of one 16-byte vector of ``t``."""
    return 16 // t.element_size()


def window_base(t: torch.Tensor) -> tuple[torch.Tensor, int]:
    """``(a 1-element view of t's memory starting on 16 bytes at or before t's first element, the elements from
    it to t's first element)``; ``(t, 0)`` when t starts on 16 bytes or its memory does not allow stepping back."""
    first = (t.data_ptr() % 16) // t.element_size()
    if first == 0 or t.storage_offset() < first:
        return t, 0
    return t.as_strided((1,), (1,), t.storage_offset() - first), first


def windows(*tensors: torch.Tensor) -> tuple[list, int, bool] | None:
    """The pointers (rounded down to 16 bytes), each tensor's first element from its pointer and whether all rows
    lie alike around 16-byte vectors (same first element offset, row strides equal modulo the vector), or None
    when these kernels cannot take the tensors (rows 2**31 or more apart; a pointer that is not a whole number
    of elements past 16 bytes; one element per vector: nothing to gain)."""
    vec = vector_of(tensors[0])
    if vec == 1 or any(t.stride(0) >= 2**31 or t.data_ptr() % t.element_size() for t in tensors):
        return None
    bases = [window_base(t) for t in tensors]
    if any(b.data_ptr() % 16 for b, _ in bases):
        return None
    firsts = [f for _, f in bases]
    n_rows = tensors[0].shape[0]
    alike = len(set(firsts)) == 1 and (n_rows <= 1 or len({t.stride(0) % vec for t in tensors}) == 1)
    return [b for b, _ in bases], firsts, alike


def takes(x: torch.Tensor, *others: torch.Tensor) -> bool:
    """Whether the dispatcher should send ``x`` here: rows that the register kernels would read one element at a
    time (not whole 16-byte vectors, or not starting on 16 bytes), and that these kernels can take."""
    vec = vector_of(x)
    if vec == 1 or x.numel() == 0 or windows(x, *others) is None:
        return False
    return row_vector(x.shape[1], x, *others) == 1 or x.data_ptr() % 16 != 0


def launch_setup(y, x, ROWS=None, BLOCK=None, num_warps=None):
    """(kernel, grid, args, options) of one tile launch (the dispatcher's fast path reuses it); the first two
    args are the window pointers of y and x."""
    n_rows, n_cols = x.shape
    got = windows(x, y)
    if got is None:
        raise ValueError("unaligned_softmax needs rows less than 2**31 elements apart")
    (x_base, y_base), (x_first, y_first), alike = got
    vec = vector_of(x)
    BLOCK = BLOCK or next_power_of_2(n_cols + vec - 1)
    if BLOCK < n_cols + vec - 1:
        raise ValueError(f"BLOCK={BLOCK} is shorter than a row's window ({n_cols} + {vec - 1} elements)")
    ROWS = ROWS or max(1, 4096 // BLOCK)
    options = dict(ROWS=ROWS, BLOCK=BLOCK, VEC=vec, SAME_HEADS=alike,
                   num_warps=num_warps or default_num_warps(ROWS * BLOCK))
    args = (y_base, x_base, x_first, x.stride(0), y_first, y.stride(0), n_rows, n_cols)
    return unaligned_softmax_kernel, (cdiv(n_rows, ROWS),), args, options


def unaligned_softmax(x: torch.Tensor, out: torch.Tensor | None = None, ROWS: int | None = None,
                      BLOCK: int | None = None, num_warps: int | None = None) -> torch.Tensor:
    """Softmax over the last dim of 2-D ``x`` with rows of any alignment, ``ROWS`` rows per program (rows up to
    ``MAX_COLS``). Knobs: ``ROWS``, ``BLOCK`` (power of two >= row length + VEC - 1), ``num_warps``."""
    x, y = prepare(x, out, MAX_COLS, "unaligned_softmax", "unaligned_cooperative_softmax", ROWS=ROWS, BLOCK=BLOCK,
                   num_warps=num_warps)
    if x.numel() == 0:
        return y
    kernel, grid, args, options = launch_setup(y, x, ROWS, BLOCK, num_warps)
    kernel[grid](*args, **options)
    return y


def cooperative_launch_setup(y, x, BLOCK=None, num_warps=None):
    """``cooperative.launch_setup`` for ``unaligned_cooperative_softmax`` (args[0:2]: the window pointers)."""
    n_rows, n_cols = x.shape
    got = windows(x, y)
    if got is None:
        raise ValueError("unaligned_cooperative_softmax needs rows less than 2**31 elements apart")
    (x_base, y_base), (x_first, y_first), alike = got
    vec = vector_of(x)
    BLOCK = BLOCK or default_block(n_cols + vec - 1, x.element_size())
    n_chunks = cdiv(n_cols + vec - 1, BLOCK)
    if n_rows * n_chunks >= 2**31:
        raise ValueError(f"unaligned_cooperative_softmax takes fewer than 2**31 programs; {n_rows} rows of "
                         f"{n_chunks} chunks is more: use a larger BLOCK")
    sizes = (2 * n_rows * n_chunks, 1 + n_rows)
    pairs, counts = scratch(x.device, *sizes)
    args = (y_base, x_base, pairs, counts, x_first, x.stride(0), y_first, y.stride(0), n_cols, n_chunks)
    options = dict(BLOCK=BLOCK, CHUNKS=next_power_of_2(n_chunks), VEC=vec, SAME_HEADS=alike,
                   num_warps=num_warps or default_warps(BLOCK))
    grid = (n_rows * n_chunks,)
    one = fits(unaligned_cooperative_kernel, grid, args, n_chunks, x.device, **options)
    return unaligned_cooperative_kernel, grid, args, dict(options, n_chunks=n_chunks), sizes, one


def unaligned_cooperative_softmax(x: torch.Tensor, out: torch.Tensor | None = None, BLOCK: int | None = None,
                                  num_warps: int | None = None, one_launch: bool | None = None) -> torch.Tensor:
    """``cooperative_softmax`` for rows of any alignment and length: each row's window shared by
    ``cdiv(n_cols + VEC - 1, BLOCK)`` programs. Knobs: ``BLOCK``, ``num_warps``, ``one_launch``."""
    x, y = prepare(x, out, BLOCK=BLOCK, num_warps=num_warps)
    if x.numel() == 0:
        return y
    run_setup(cooperative_launch_setup(y, x, BLOCK, num_warps), x.device, one_launch)
    return y


def backward_setup(dx, y, dy, ROWS=None, BLOCK=None, num_warps=None):
    """``(kernel, grid, args, options, sizes, one)`` of ``unaligned_backward``'s launch (``args[0:3]``: the window
    pointers of dx, y, dy; for the cooperative kernel as in ``cooperative.backward_setup``; for the tile,
    ``sizes`` None and ``one`` True), or None when the three tensors' rows lie differently."""
    got = windows(y, dy, dx)
    if got is None or not got[2]:
        return None
    (y_base, dy_base, dx_base), (first, _, _), _ = got
    n_rows, n_cols = y.shape
    vec = vector_of(y)
    width = n_cols + vec - 1
    strides = (y.stride(0), dy.stride(0), dx.stride(0))
    tuned = UNALIGNED_BACKWARD[y.element_size()] if y.element_size() in UNALIGNED_BACKWARD else {}
    if width <= BACKWARD_TILE_COLS and (BLOCK is None or BLOCK >= width):
        BLOCK = BLOCK or next_power_of_2(width)
        if BLOCK <= tuned.get("short", 0):  # short 16-bit rows: fewer rows and warps per program (tuning.py)
            ROWS, num_warps = ROWS or tuned["ROWS"], num_warps or tuned["num_warps"]
        ROWS = ROWS or max(1, BACKWARD_TILE // BLOCK)
        args = (dx_base, y_base, dy_base, first, *strides, n_rows, n_cols)
        options = dict(ROWS=ROWS, BLOCK=BLOCK, VEC=vec, num_warps=num_warps or default_num_warps(ROWS * BLOCK))
        return unaligned_backward_kernel, (cdiv(n_rows, ROWS),), args, options, None, True
    BLOCK = BLOCK or tuned.get("BLOCK") or default_block(width, y.element_size(), COOPERATIVE_BACKWARD_BYTES)
    num_warps = num_warps or tuned.get("cooperative_warps")
    n_chunks = cdiv(width, BLOCK)
    sizes = (n_rows * n_chunks, 1 + n_rows)
    dot, counts = scratch(y.device, *sizes)
    args = (dx_base, y_base, dy_base, dot, counts, first, *strides, n_cols, n_chunks)
    options = dict(BLOCK=BLOCK, CHUNKS=next_power_of_2(n_chunks), VEC=vec, num_warps=num_warps or default_warps(BLOCK))
    grid = (n_rows * n_chunks,)
    one = fits(unaligned_cooperative_backward_kernel, grid, args, n_chunks, y.device, **options)
    return unaligned_cooperative_backward_kernel, grid, args, dict(options, n_chunks=n_chunks), sizes, one


def unaligned_backward(y: torch.Tensor, dy: torch.Tensor, dx: torch.Tensor, ROWS: int | None = None,
                       BLOCK: int | None = None, num_warps: int | None = None) -> torch.Tensor | None:
    """dx = y·(dy - Σ dy·y) for checked 2-D y, dy, dx with contiguous rows that lie alike around 16-byte vectors
    (``softmax_backward`` calls this); rows up to ``tuning.BACKWARD_TILE_COLS`` in [ROWS, BLOCK] tiles, longer
    ones on cooperating programs. None when the three tensors' rows lie differently (the caller falls back)."""
    got = backward_setup(dx, y, dy, ROWS, BLOCK, num_warps)
    if got is None:
        return None
    run_setup(got, y.device, counts_at=4)
    return dx
