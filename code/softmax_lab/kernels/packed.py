"""Short rows packed end to end: a contiguous tensor read as one run of whole 16-byte vectors.

A bf16 row of 130 elements is 260 bytes, so rows start 0, 4, 8 or 12 bytes past a vector boundary: a
``[ROWS, BLOCK]`` tile of them is loaded a few bytes at a time (``multirow``), or in windows that are half
padding (``unaligned``), and either way the GPU spends more time issuing instructions (an address per element,
masks on padding) than moving bytes. But the rows of a contiguous tensor lie end to end: ``ROWS`` rows are one
run of ``ROWS · n_cols`` elements, and when that is whole vectors every program's run starts the same ``first``
elements past a vector boundary. So each program loads its run as ``[NV, VEC]``: NV whole vectors, one per
thread at a time, from the boundary before the run.

Rows of at least VEC elements put at most two rows in a vector: its first elements end row ``a`` and the rest
begin row ``a + 1`` (``in_a``: the elements before the boundary). Each thread reduces its own vectors to two
partials (max, then sum of exp, for the part of row ``a`` and the part of row ``a + 1``); ``tl.gather`` collects
a row's partials from the vectors it touches into a small ``[ROWS, S]`` tile (S: vectors per row) to combine
them, and hands each vector its two rows' results back. The whole vectors inside the run are stored 16 bytes at
a time; the two vectors the run shares with its neighbours (before its first element, after its last) element
by element.

``packed_softmax_kernel(out_ptr, in_ptr, first, n_rows, n_cols, inv_cols, run_v, ROWS, ROWS_P2, NV, S, VEC)``
  first: the elements from the (rounded down) pointers to row 0, the same for input and output; inv_cols:
  1 / n_cols (a row index is a multiply); run_v: a program's run, ``ROWS · n_cols``, in vectors.
"""
from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from ._launch import cdiv, next_power_of_2, prepare
from .fast_exp import fast_exp
from .unaligned import vector_of, windows


@triton.jit
def _per_row(part_a, part_b, first, n_cols, rows_here, IS_MAX: tl.constexpr, ROWS_P2: tl.constexpr,
             S: tl.constexpr, VEC: tl.constexpr):
    """Each row's max (IS_MAX) or sum of the per-vector partials: row r touches vectors v0(r) .. v1(r); its part
    of v0 is the vector's second part when the row starts inside it, else the first."""
    r = tl.arange(0, ROWS_P2)[:, None]
    s = tl.arange(0, S)[None, :]
    start = first + r * n_cols
    v = start // VEC + s
    ok = (v <= (start + n_cols - 1) // VEC) & (r < rows_here)
    second = (s == 0) & (start % VEC != 0)
    both = tl.reshape(tl.join(part_a, part_b), [2 * part_a.shape[0]])  # [a0, b0, a1, b1, ...]
    got = tl.gather(both, tl.reshape(tl.where(ok, 2 * v + second.to(tl.int32), 0), [ROWS_P2 * S]), 0)
    got = tl.reshape(got, [ROWS_P2, S])
    if IS_MAX:
        out = tl.max(tl.where(ok, got, float("-inf")), axis=1)
        return tl.where(tl.arange(0, ROWS_P2) < rows_here, out, 0.0)  # rows past the end: 0, not -inf
    out = tl.sum(tl.where(ok, got, 0.0), axis=1)
    return tl.where(tl.arange(0, ROWS_P2) < rows_here, out, 1.0)


@triton.jit
def _to_vectors(per_row, row_a, ROWS_P2: tl.constexpr):
    """(value of row a, value of row a + 1) for each vector (rows outside the run: any row's value, unused)."""
    a = tl.minimum(tl.maximum(row_a, 0), ROWS_P2 - 1)
    b = tl.minimum(row_a + 1, ROWS_P2 - 1)  # (row_a >= -1)
    both = tl.reshape(tl.join(a, b), [2 * row_a.shape[0]])
    return tl.split(tl.reshape(tl.gather(per_row, both, 0), [row_a.shape[0], 2]))


@triton.jit
def packed_softmax_kernel(out_ptr, in_ptr, first, n_rows, n_cols, inv_cols, run_v, ROWS: tl.constexpr,
                          ROWS_P2: tl.constexpr, NV: tl.constexpr, S: tl.constexpr, VEC: tl.constexpr):
    pid = tl.program_id(0)
    base = pid.to(tl.int64) * (run_v * VEC)  # this program's run starts at base + first: the same head for all
    rows_here = tl.minimum(n_rows - pid.to(tl.int64) * ROWS, ROWS).to(tl.int32)
    end = first + rows_here * n_cols  # the run: block positions [first, end)
    v = tl.arange(0, NV)
    k = tl.arange(0, VEC)[None, :]
    at = v[:, None] * VEC + k
    # 1. The run, whole vectors up to the one holding its last element.
    x = tl.load(in_ptr + base + at, mask=(v < (end + VEC - 1) // VEC)[:, None], other=0.0).to(tl.float32)
    # Row a of each vector (the row of its first position: -1 before the run, rows_here and up after it; a float
    # multiply for the floor division) and where in the vector row a + 1 begins. Positions outside the run
    # belong to rows outside [0, rows_here): their partials are never gathered, and they are never stored.
    row_a = ((v * VEC - first + n_cols).to(tl.float32) * inv_cols + 0.5 * inv_cols).to(tl.int32) - 1
    in_a = k < ((row_a + 1) * n_cols + first - v * VEC)[:, None]
    # 2. Each row's max: per vector, then combined over the vectors the row touches.
    m = _per_row(tl.max(tl.where(in_a, x, float("-inf")), axis=1), tl.max(tl.where(in_a, float("-inf"), x), axis=1),
                 first, n_cols, rows_here, True, ROWS_P2, S, VEC)
    m_a, m_b = _to_vectors(m, row_a, ROWS_P2)
    # 3. exp(x - its row's max), each row's sum the same way, and 1/sum back to the vectors.
    num = fast_exp(x - tl.where(in_a, m_a[:, None], m_b[:, None]))
    total = _per_row(tl.sum(tl.where(in_a, num, 0.0), axis=1), tl.sum(tl.where(in_a, 0.0, num), axis=1),
                     first, n_cols, rows_here, False, ROWS_P2, S, VEC)  # (an all -inf row: NaN, its own only)
    s_a, s_b = _to_vectors(1.0 / total, row_a, ROWS_P2)
    y = (num * tl.where(in_a, s_a[:, None], s_b[:, None])).to(out_ptr.dtype.element_ty)
    # 4. Store: whole vectors inside the run; the vectors holding its first and last elements element by element.
    lo, hi = (first + VEC - 1) // VEC, end // VEC
    tl.store(out_ptr + base + at, y, mask=((v >= lo) & (v < hi))[:, None])
    edge = tl.where(tl.arange(0, 2)[:, None] == 0, 0, hi) + tl.zeros([2, VEC], tl.int32)  # [[0]*VEC, [hi]*VEC]
    edge_at = edge * VEC + k
    ok = ((edge_at - first).to(tl.uint32) < (end - first)) & ((edge < lo) | (edge >= hi))
    tl.store(out_ptr + base + edge_at, tl.gather(y, tl.minimum(edge, NV - 1), 0), mask=ok)


def rows_per_program(n_cols: int, vec: int, span: int) -> int:
    """The most rows whose run fits ``span`` positions with a vector to spare, in steps that keep the run whole
    vectors (0 when not even one step fits)."""
    step = vec // math.gcd(n_cols, vec)
    return (span - vec) // n_cols // step * step


def takes(x: torch.Tensor, y: torch.Tensor | None = None) -> bool:
    """Whether ``x`` (and its output ``y``; None: a new contiguous one) can be read as packed runs: contiguous
    rows of at least one vector that are not whole vectors, rows less than 2**22 elements long, input and
    output starting alike around 16-byte vectors."""
    vec = vector_of(x)
    n_rows, n_cols = x.shape
    if vec == 1 or n_cols < vec or n_cols % vec == 0 or n_cols >= 2**22 or x.numel() == 0 or not x.is_contiguous():
        return False
    got = windows(x, *([] if y is None else [y]))
    if got is None:
        return False
    if y is None:
        return x.data_ptr() % 16 == 0
    return y.is_contiguous() and got[1][0] == got[1][1]


def launch_setup(y, x, SPAN=None, num_warps=None):
    """(kernel, grid, args, options) of one launch; the first two args are the window pointers of y and x."""
    n_rows, n_cols = x.shape
    vec = vector_of(x)
    SPAN = SPAN or 4096
    rows = rows_per_program(n_cols, vec, SPAN)
    if rows < 1:
        raise ValueError(f"packed_softmax: SPAN={SPAN} holds no whole run of rows of {n_cols}; use a larger SPAN")
    (x_base, y_base), (first, _), _ = windows(x, y)
    options = dict(ROWS=rows, ROWS_P2=next_power_of_2(rows), NV=SPAN // vec, S=next_power_of_2(cdiv(n_cols, vec) + 1),
                   VEC=vec, num_warps=num_warps or 4)
    args = (y_base, x_base, first, n_rows, n_cols, 1.0 / n_cols, rows * n_cols // vec)
    return packed_softmax_kernel, (cdiv(n_rows, rows),), args, options


def packed_softmax(x: torch.Tensor, out: torch.Tensor | None = None, SPAN: int | None = None,
                   num_warps: int | None = None) -> torch.Tensor:
    """Softmax over the last dim of a contiguous 2-D ``x`` whose rows are not whole 16-byte vectors, as packed runs
    of rows (rows of VEC to ``SPAN`` - VEC elements). Knobs: ``SPAN`` (positions per program, a power of two;
    default 4096), ``num_warps`` (default 4)."""
    x, y = prepare(x, out, None, "packed_softmax", BLOCK=SPAN, num_warps=num_warps)
    if x.numel() == 0:
        return y
    if not takes(x, y):
        raise ValueError("packed_softmax takes contiguous rows of at least one 16-byte vector that are not whole "
                         "vectors, into a contiguous output that starts like the input around 16-byte vectors; "
                         "use unaligned_softmax or multirow_softmax")
    kernel, grid, args, options = launch_setup(y, x, SPAN, num_warps)
    kernel[grid](*args, **options)
    return y
