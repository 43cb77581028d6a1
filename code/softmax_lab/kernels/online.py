"""Online softmax: rows of any length, walking each row in tiles of BLOCK.

Pass 1 keeps a running max ``m`` and a running sum ``l`` of exp(x - m). When a tile raises the max from
``m`` to ``m_new``, the old sum is rescaled: ``l = l·exp(m - m_new) + Σ exp(tile - m_new)``. Here every lane
of the tile keeps its own (m, l) (the Σ is then over one element), and the lanes are combined once at the
end: no reduction inside the loop. Pass 2 reads the row again and writes exp(x - max) / sum.

The update and the -inf care (shift by 0 while a lane has seen only -inf) are ``combine.py``'s helpers, shared
with split-row and cooperative softmax. A row that is -inf everywhere gives NaN, like torch.softmax.

Reading the row twice costs memory traffic unless the second read comes from the L2 cache. Two things help:
pass 2 walks the row backwards (the tiles pass 1 read last are read first), and ``programs`` can cap how
many programs run ("persistent" programs, each taking rows p, p + P, p + 2P, ...), so that the rows in flight
fit in the L2 cache. The eviction hints ask the cache to keep pass 1's data and drop pass 2's.
"""
import torch
import triton
import triton.language as tl

from .tuning import STREAM_BLOCK
from ._launch import prepare, default_num_warps, next_power_of_2
from .combine import online_combine, online_reduce


@triton.jit
def online_softmax_kernel(out_ptr, in_ptr, in_row_stride, out_row_stride, n_rows, n_cols, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    n_tiles = tl.cdiv(n_cols, BLOCK)
    # Program p takes rows p, p + P, p + 2P, ... (P = number of programs; P = n_rows: one row each).
    # The row counter is int64 (it starts from an int64), since row * stride can pass 2**31.
    for row in range(tl.program_id(0).to(tl.int64), n_rows, tl.num_programs(0)):
        in_row = in_ptr + row * in_row_stride
        out_row = out_ptr + row * out_row_stride

        # Pass 1: running max m and running sum l, per lane.
        m = tl.full([BLOCK], float("-inf"), tl.float32)
        l = tl.zeros([BLOCK], tl.float32)
        for start in range(0, n_cols, BLOCK):
            x = tl.load(in_row + start + offs, mask=start + offs < n_cols, other=float("-inf"),
                        eviction_policy="evict_last").to(tl.float32)
            m, l = online_combine(m, l, x, 1.0)  # fold x (the state (x, 1)) into each lane's (m, l)

        # Combine the lanes: the row max, and every lane's sum rescaled to it.
        row_max, total = online_reduce(m, l)
        inv_total = 1.0 / total

        # Pass 2: read the row again, last tile first (likeliest still in L2), and write the result.
        for i in range(0, n_tiles):
            start = (n_tiles - 1 - i) * BLOCK
            mask = start + offs < n_cols
            x = tl.load(in_row + start + offs, mask=mask, other=float("-inf"),
                        eviction_policy="evict_first").to(tl.float32)
            y = tl.exp(x - row_max) * inv_total
            tl.store(out_row + start + offs, y.to(out_ptr.dtype.element_ty), mask=mask,
                     eviction_policy="evict_first")


def online_softmax(x: torch.Tensor, out: torch.Tensor | None = None, BLOCK: int | None = None,
                   num_warps: int | None = None, programs: int | None = None) -> torch.Tensor:
    """Softmax over the last dim of 2-D ``x`` for rows of any length. Knobs: ``BLOCK`` (tile, power of two),
    ``num_warps``, ``programs`` (how many programs share the rows; default one per row)."""
    x, y = prepare(x, out, BLOCK=BLOCK, num_warps=num_warps, programs=programs)
    n_rows, n_cols = x.shape
    if x.numel() == 0:
        return y
    BLOCK = BLOCK or min(next_power_of_2(n_cols), STREAM_BLOCK)
    num_warps = num_warps or default_num_warps(BLOCK)
    grid = (min(n_rows, programs or n_rows),)
    online_softmax_kernel[grid](y, x, x.stride(0), y.stride(0), n_rows, n_cols, BLOCK=BLOCK, num_warps=num_warps)
    return y
