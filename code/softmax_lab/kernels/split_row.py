"""Split-row softmax: several programs per row, for a few very long rows (e.g. 16 rows of 1,048,576).

One program per row would leave most of the GPU idle (16 programs for 132 multiprocessors). So each row is
cut into ``chunks`` pieces, and two launches do the work:

1. ``chunk_stats_kernel``: one program per (row, chunk) computes its chunk's max ``m_c`` and sum
   ``l_c = Σ exp(x - m_c)`` (per lane, as in online softmax) and writes the pair.
2. ``chunk_normalize_kernel``: one program per (row, chunk) combines its row's pairs,
   ``M = max m_c`` and ``L = Σ l_c·exp(m_c - M)``, then reads its chunk again and writes exp(x - M) / L.

Launch 2 numbers its programs backwards, so the chunks launch 1 read last (likeliest still in the L2 cache)
are read first; eviction hints ask the cache to keep launch 1's data and drop launch 2's.
"""
import torch
import triton
import triton.language as tl

from .tuning import SPLIT_ROW_PROGRAMS_PER_SM, STREAM_BLOCK
from ._launch import prepare, default_num_warps, cdiv, next_power_of_2, num_sms, split_in_chunks
from .combine import online_combine, online_reduce


@triton.jit
def chunk_stats_kernel(m_ptr, l_ptr, in_ptr, in_row_stride, n_cols, chunk_size, n_chunks, BLOCK: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    row = pid // n_chunks
    chunk = pid % n_chunks
    in_row = in_ptr + row * in_row_stride
    offs = tl.arange(0, BLOCK)
    m = tl.full([BLOCK], float("-inf"), tl.float32)
    l = tl.zeros([BLOCK], tl.float32)
    for start in range(chunk * chunk_size, tl.minimum((chunk + 1) * chunk_size, n_cols), BLOCK):
        x = tl.load(in_row + start + offs, mask=start + offs < n_cols, other=float("-inf"),
                    eviction_policy="evict_last").to(tl.float32)  # keep it in L2 for launch 2 if it can
        m, l = online_combine(m, l, x, 1.0)  # per lane, as in online softmax
    m_chunk, l_chunk = online_reduce(m, l)  # an all -inf chunk gives (m, l) = (-inf, 0)
    tl.store(m_ptr + pid, m_chunk)
    tl.store(l_ptr + pid, l_chunk)


@triton.jit
def chunk_normalize_kernel(out_ptr, in_ptr, m_ptr, l_ptr, in_row_stride, out_row_stride, n_cols, chunk_size,
                           n_chunks, BLOCK: tl.constexpr, CHUNKS: tl.constexpr):
    pid = tl.num_programs(0) - 1 - tl.program_id(0).to(tl.int64)  # backwards: see the module docstring
    row = pid // n_chunks
    chunk = pid % n_chunks
    # Combine this row's (m_c, l_c) pairs. A row that is -inf everywhere gives NaN, like torch.softmax.
    c = tl.arange(0, CHUNKS)
    m_c = tl.load(m_ptr + row * n_chunks + c, mask=c < n_chunks, other=float("-inf"))
    l_c = tl.load(l_ptr + row * n_chunks + c, mask=c < n_chunks, other=0.0)
    row_max, total = online_reduce(m_c, l_c)  # padding pairs (-inf, 0) add nothing
    inv_total = 1.0 / total
    # Normalise this program's chunk.
    offs = tl.arange(0, BLOCK)
    for start in range(chunk * chunk_size, tl.minimum((chunk + 1) * chunk_size, n_cols), BLOCK):
        mask = start + offs < n_cols
        x = tl.load(in_ptr + row * in_row_stride + start + offs, mask=mask, other=float("-inf"),
                    eviction_policy="evict_first").to(tl.float32)
        y = tl.exp(x - row_max) * inv_total
        tl.store(out_ptr + row * out_row_stride + start + offs, y.to(out_ptr.dtype.element_ty), mask=mask,
                 eviction_policy="evict_first")  # don't let the output push the input out of L2


def split_row_softmax(x: torch.Tensor, out: torch.Tensor | None = None, chunks: int | None = None,
                      BLOCK: int | None = None, num_warps: int | None = None,
                      rows_per_launch: int | None = None) -> torch.Tensor:
    """Softmax over the last dim of 2-D ``x`` with ``chunks`` programs per row (default: enough programs to
    fill the GPU, about 4 per multiprocessor). Knobs: ``chunks``, ``BLOCK`` (tile), ``num_warps``, and
    ``rows_per_launch``: do the two launches for this many rows at a time (default: all rows), so that launch 2
    can find the rows launch 1 just read in the L2 cache."""
    x, y = prepare(x, out, chunks=chunks, BLOCK=BLOCK, num_warps=num_warps, rows_per_launch=rows_per_launch)
    n_rows, n_cols = x.shape
    if x.numel() == 0:
        return y
    BLOCK = BLOCK or min(next_power_of_2(n_cols), STREAM_BLOCK)
    rows_per_launch = min(rows_per_launch or n_rows, n_rows)
    if chunks is None:
        chunks = cdiv(SPLIT_ROW_PROGRAMS_PER_SM * num_sms(x.device), rows_per_launch)
    chunks, chunk_size = split_in_chunks(n_cols, chunks, BLOCK)
    num_warps = num_warps or default_num_warps(BLOCK)
    m = torch.empty(rows_per_launch * chunks, dtype=torch.float32, device=x.device)
    l = torch.empty(rows_per_launch * chunks, dtype=torch.float32, device=x.device)
    for first in range(0, n_rows, rows_per_launch):
        xs, ys = x[first:first + rows_per_launch], y[first:first + rows_per_launch]
        grid = (xs.shape[0] * chunks,)
        chunk_stats_kernel[grid](m, l, xs, xs.stride(0), n_cols, chunk_size, chunks, BLOCK=BLOCK,
                                 num_warps=num_warps)
        chunk_normalize_kernel[grid](ys, xs, m, l, xs.stride(0), ys.stride(0), n_cols, chunk_size, chunks,
                                     BLOCK=BLOCK, CHUNKS=next_power_of_2(chunks), num_warps=num_warps)
    return y
