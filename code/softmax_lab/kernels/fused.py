"""Fused softmax: one program per row, the whole row in one block.

``fused_softmax_kernel(out_ptr, in_ptr, in_row_stride, out_row_stride, n_cols, BLOCK, VEC=1)``
  out_ptr, in_ptr   output and input (any float dtype; maths in float32)
  *_row_stride      elements from one row to the next (so strided views like big[:, :1000] work)
  n_cols            row length; BLOCK is the next power of two >= n_cols (a tl.constexpr)
  VEC               the three ints count VEC-element pieces (a tl.constexpr; 1: plain elements)

Load once (padding lanes read -inf, so they cannot win the max and exp() to 0), max, exp, sum, store
once: x is read once and y written once, the least memory traffic softmax can have. The whole row lives in
registers, so rows are limited to ``MAX_COLS``; longer rows need ``online_softmax``.

Why ``VEC``: Triton compiles a kernel knowing which int arguments are multiples of 16, and nothing more. A row
of 1,000 fp32 (or 8,200 bf16) elements starts on 16 bytes, but from a stride of 1,000 the compiler cannot know
it, so it loads and stores one element at a time. The launcher passes ``VEC`` = the elements of a 16-byte vector
when every row is whole vectors (``_launch.row_vector``), and the ints divided by it: multiplied back by a
constant, they are multiples the compiler can see, and it moves 16 bytes per instruction. (16-bit rows that are
whole 4- or 8-byte pieces get VEC = 2 or 4 the same way: ``_launch.part_vector``.)
"""
import torch
import triton
import triton.language as tl

from ._launch import prepare, default_num_warps, next_power_of_2, part_vector
from .fast_exp import fast_exp

MAX_COLS = 65536


@triton.jit
def fused_softmax_kernel(out_ptr, in_ptr, in_row_stride, out_row_stride, n_cols, BLOCK: tl.constexpr,
                         VEC: tl.constexpr = 1):
    in_row_stride, out_row_stride, n_cols = in_row_stride * VEC, out_row_stride * VEC, n_cols * VEC
    row = tl.program_id(0).to(tl.int64)  # int64: row * stride can pass 2**31
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    # 1. Load the row once; lanes past the end read -inf (0 would break all-negative rows).
    x = tl.load(in_ptr + row * in_row_stride + cols, mask=mask, other=float("-inf")).to(tl.float32)
    # 2. Subtract the max (no overflow), exponentiate, normalise: all in registers.
    x = x - tl.max(x, axis=0)
    num = fast_exp(x)  # tl.exp(x), in two instructions on a GPU (fast_exp.py says why)
    y = num * (1.0 / tl.sum(num, axis=0))  # one division per row, not one per element
    # 3. Store once, in the output's dtype.
    tl.store(out_ptr + row * out_row_stride + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


def fused_softmax(x: torch.Tensor, out: torch.Tensor | None = None, BLOCK: int | None = None,
                  num_warps: int | None = None) -> torch.Tensor:
    """Softmax over the last dim of 2-D ``x``, one program per row. Knobs: ``BLOCK`` (power of two >= row
    length), ``num_warps`` (threads per program / 32)."""
    x, y = prepare(x, out, MAX_COLS, "fused_softmax", "online_softmax or split_row_softmax",
                   BLOCK=BLOCK, num_warps=num_warps)
    if x.numel() == 0:
        return y
    kernel, grid, args, options = launch_setup(y, x, BLOCK, num_warps)
    kernel[grid](*args, **options)
    return y


def launch_setup(y, x, BLOCK=None, num_warps=None):
    """(kernel, grid, args, options) of one launch (the dispatcher's fast path reuses it)."""
    n_rows, n_cols = x.shape
    BLOCK = BLOCK or next_power_of_2(n_cols)
    if BLOCK < n_cols:
        raise ValueError(f"BLOCK={BLOCK} is shorter than the row ({n_cols}); the fused kernel needs the whole row")
    vec = part_vector(n_cols, x, y)  # the ints go in vectors, or the widest pieces rows allow (see above)
    options = dict(BLOCK=BLOCK, VEC=vec, num_warps=num_warps or default_num_warps(BLOCK))
    return fused_softmax_kernel, (n_rows,), (y, x, x.stride(0) // vec, y.stride(0) // vec, n_cols // vec), options
