"""Naive softmax: one program per OUTPUT ELEMENT.

Every program re-reads its whole row twice (once for the max, once for the sum) just to write one number,
so a row of N elements costs about 2·N² loads: O(N²) work for an O(N) problem. Correct, and very slow:
the baseline the other kernels improve on. Rows of up to ``MAX_COLS`` elements.
"""
import torch
import triton
import triton.language as tl

from ._launch import prepare, next_power_of_2

MAX_COLS = 16384


@triton.jit
def naive_softmax_kernel(out_ptr, in_ptr, in_row_stride, out_row_stride, n_cols, BLOCK: tl.constexpr):
    # Which element is mine? The grid has one program per (row, col), numbered row by row.
    pid = tl.program_id(0).to(tl.int64)  # int64: row * stride can pass 2**31
    row = pid // n_cols
    col = pid % n_cols
    in_row = in_ptr + row * in_row_stride
    offs = tl.arange(0, BLOCK)

    # 1. Walk the whole row, a tile at a time, for its max (lanes past the end read -inf).
    m = tl.full([BLOCK], float("-inf"), tl.float32)
    for start in range(0, n_cols, BLOCK):
        x = tl.load(in_row + start + offs, mask=start + offs < n_cols, other=float("-inf")).to(tl.float32)
        m = tl.maximum(m, x)
    row_max = tl.max(m, axis=0)

    # 2. Walk the whole row again for the sum of exp(x - max) (exp(-inf) = 0 for the padding).
    s = tl.zeros([BLOCK], tl.float32)
    for start in range(0, n_cols, BLOCK):
        x = tl.load(in_row + start + offs, mask=start + offs < n_cols, other=float("-inf")).to(tl.float32)
        s += tl.exp(x - row_max)
    total = tl.sum(s, axis=0)

    # 3. All that, for one output value.
    mine = tl.load(in_row + col).to(tl.float32)
    y = tl.exp(mine - row_max) / total
    tl.store(out_ptr + row * out_row_stride + col, y.to(out_ptr.dtype.element_ty))


def naive_softmax(x: torch.Tensor, out: torch.Tensor | None = None, BLOCK: int | None = None,
                  num_warps: int = 4) -> torch.Tensor:
    """Softmax over the last dim of 2-D ``x`` with one program per element. ``BLOCK``: tile of the row walks."""
    x, y = prepare(x, out, MAX_COLS, "naive_softmax", "fused_softmax or online_softmax", in_place=False,
                   BLOCK=BLOCK, num_warps=num_warps)
    n_rows, n_cols = x.shape
    if x.numel() == 0:
        return y
    BLOCK = BLOCK or min(next_power_of_2(n_cols), 1024)
    naive_softmax_kernel[(n_rows * n_cols,)](y, x, x.stride(0), y.stride(0), n_cols, BLOCK=BLOCK, num_warps=num_warps)
    return y
