"""Multi-row fused softmax: each program takes ROWS rows at once, as a [ROWS, BLOCK] tile.

With short rows (128-512 elements) one row per program is too little work: a program finishes almost as
soon as it starts, and most of the time goes into starting programs and waiting for the first loads.
Giving each program several rows keeps more loads in flight. Same maths as ``fused``, with the reductions
along axis 1 (one max and one sum per row of the tile). ``VEC``: as in ``fused`` (the ints count VEC-element
pieces, so rows of whole 16-byte vectors are loaded and stored 16 bytes at a time).
"""
import torch
import triton
import triton.language as tl

from .tuning import MULTIROW_TILE
from ._launch import prepare, default_num_warps, cdiv, next_power_of_2, part_vector, power_of_2_at_most
from .fast_exp import fast_exp

MAX_COLS = 65536


@triton.jit
def multirow_softmax_kernel(out_ptr, in_ptr, in_row_stride, out_row_stride, n_rows, n_cols,
                            ROWS: tl.constexpr, BLOCK: tl.constexpr, VEC: tl.constexpr = 1, TAIL: tl.constexpr = 0):
    in_row_stride, out_row_stride, n_cols = in_row_stride * VEC, out_row_stride * VEC, n_cols * VEC
    # This program's rows (int64: row * stride can pass 2**31) and the columns of the tile.
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK)
    mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
    # 1. Load a [ROWS, BLOCK] tile; padding columns read -inf. Rows past the end (last program only) read
    #    nothing and are set to 0, so no all -inf row makes -inf - (-inf) = NaN; they are never stored.
    x = tl.load(in_ptr + rows[:, None] * in_row_stride + cols[None, :], mask=mask,
                other=float("-inf")).to(tl.float32)
    x = tl.where(rows[:, None] < n_rows, x, 0.0)
    m = tl.max(x, axis=1)
    if TAIL:  # rows a little past a power of two: the last columns in a second, narrow tile [ROWS, TAIL]
        tail_cols = BLOCK + tl.arange(0, TAIL)
        tail_mask = (rows[:, None] < n_rows) & (tail_cols[None, :] < n_cols)
        t = tl.load(in_ptr + rows[:, None] * in_row_stride + tail_cols[None, :], mask=tail_mask,
                    other=float("-inf")).to(tl.float32)
        t = tl.where(rows[:, None] < n_rows, t, 0.0)
        m = tl.maximum(m, tl.max(t, axis=1))
    # 2. Softmax of every row of the tile: reduce along axis 1.
    num = fast_exp(x - m[:, None])  # tl.exp, in two instructions on a GPU (fast_exp.py)
    total = tl.sum(num, axis=1)
    if TAIL:
        tail_num = fast_exp(t - m[:, None])
        total += tl.sum(tail_num, axis=1)
    scale = 1.0 / total  # one division per row
    # 3. Store the tile (rows past the end are masked off).
    y = num * scale[:, None]
    tl.store(out_ptr + rows[:, None] * out_row_stride + cols[None, :], y.to(out_ptr.dtype.element_ty), mask=mask)
    if TAIL:
        tl.store(out_ptr + rows[:, None] * out_row_stride + tail_cols[None, :],
                 (tail_num * scale[:, None]).to(out_ptr.dtype.element_ty), mask=tail_mask)


def multirow_softmax(x: torch.Tensor, out: torch.Tensor | None = None, ROWS: int | None = None,
                     BLOCK: int | None = None, num_warps: int | None = None, tail: bool = False) -> torch.Tensor:
    """Softmax over the last dim of 2-D ``x``, ``ROWS`` rows per program (a power of two; default
    ``tuning.MULTIROW_TILE // BLOCK``). Knobs: ``ROWS``, ``BLOCK`` (power of two >= row length), ``num_warps``;
    ``tail=True``: the tile is the largest power of two the row holds (or ``BLOCK``), and the rest of the row
    a second tile of the next power of two above it (a row of 130 as 128 + 2, where one tile would be 256)."""
    if not isinstance(tail, bool):
        raise TypeError(f"tail must be True or False, got {type(tail).__name__}")
    x, y = prepare(x, out, MAX_COLS, "multirow_softmax", "online_softmax or split_row_softmax",
                   ROWS=ROWS, BLOCK=BLOCK, num_warps=num_warps)
    if x.numel() == 0:
        return y
    kernel, grid, args, options = launch_setup(y, x, ROWS, BLOCK, num_warps, tail)
    kernel[grid](*args, **options)
    return y


def launch_setup(y, x, ROWS=None, BLOCK=None, num_warps=None, tail=False):
    """(kernel, grid, args, options) of one launch (the dispatcher's fast path reuses it)."""
    n_rows, n_cols = x.shape
    vec = part_vector(n_cols, x, y)  # the ints go in vectors, or in the widest pieces rows allow (fused.py)
    TAIL = 0
    if tail:
        default = max(vec, power_of_2_at_most(max(1, n_cols)))
        BLOCK = BLOCK or default
        TAIL = next_power_of_2(n_cols - BLOCK) if n_cols > BLOCK else 0
        TAIL = TAIL and max(TAIL, vec)  # (whole pieces: the tail starts on one, at BLOCK)
        if TAIL > BLOCK:
            raise ValueError(f"with tail=True, BLOCK={BLOCK} must hold at least half the row ({n_cols}): the tail "
                             f"tile would be {TAIL} wide; use BLOCK={default} (the default) or more")
    BLOCK = BLOCK or next_power_of_2(n_cols)
    if BLOCK + TAIL < n_cols:
        raise ValueError(f"BLOCK={BLOCK} is shorter than the row ({n_cols}); the tile must hold whole rows")
    ROWS = ROWS or power_of_2_at_most(max(1, MULTIROW_TILE // (BLOCK + TAIL)))
    options = dict(ROWS=ROWS, BLOCK=BLOCK, VEC=vec, TAIL=TAIL,
                   num_warps=num_warps or default_num_warps(ROWS * BLOCK))
    args = (y, x, x.stride(0) // vec, y.stride(0) // vec, n_rows, n_cols // vec)
    return multirow_softmax_kernel, (cdiv(n_rows, ROWS),), args, options
