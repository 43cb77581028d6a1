"""Pipelined cooperative softmax: the same handshake as ``cooperative.py``, the next chunk loaded before each wait.

In ``cooperative_softmax`` a program's life is load, reduce, publish, *wait*, write, and then it ends: while
it waits for its row's partners it holds registers but has no loads in flight, so the memory system idles.
Here a fixed number of programs (as many as the GPU holds at once) loop over the work items ``(row, chunk)``:

1. take its next ticket, load that chunk, reduce it (``e = exp(x - m)`` stays in registers), publish its
   ``(m, l)`` and count in;
2. only then wait for the partners of the *previous* item's row, and write ``y = e·exp(m - M) / L`` for it.

So while a program waits, its next chunk is already loaded and published. It holds two chunks (the two
``e``): the default ``BLOCK`` is half of ``cooperative``'s.

**No deadlock, when a row has no more chunks than there are programs** (the launcher checks). A program waits
only after publishing every item it holds. Take the earliest row not finished: if all its chunks are taken,
they are published, and it finishes. If not, every program whose item is in an earlier row moves on, so in
the end every program waits on this row, holding one of its chunks each: more chunks than programs, which
the launcher refused. (An earlier version took its next ticket but published it only after the wait: a
program could then hold, unpublished, a chunk of the very row it waited for, and an H200 test hung.) In the CPU
interpreter (programs run one after another) and with ``one_launch=False``, two launches, with nothing to wait
for and so nothing to overlap, loop over their items in a plain ``range``: the first only publishes, the second
writes. (They once ran the pipelined loop above with tickets counted from the program id; on an H200 the
publishing launch wrote nothing for 2 rows of 31 in one chunk each: the loop is kept to the one launch.)
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .tuning import COOPERATIVE_BYTES
from ._launch import cdiv, next_power_of_2, num_sms, prepare
from .combine import safe_shift
from .cooperative import count_in, default_block, default_warps, resident_programs, row_state, wait_for_partners
from .fast_exp import fast_exp


@triton.jit
def load_chunk(in_ptr, in_row_stride, t, n_chunks, n_cols, n_items, BLOCK: tl.constexpr):
    """Item t's chunk as float32 (-inf past the row's end; nothing at all past the last item)."""
    cols = (t % n_chunks) * BLOCK + tl.arange(0, BLOCK)
    row = (t // n_chunks).to(tl.int64)  # int64: row * stride can pass 2**31
    return tl.load(in_ptr + row * in_row_stride + cols, mask=(cols < n_cols) & (t < n_items),
                   other=float("-inf")).to(tl.float32)


@triton.jit
def reduce_and_publish(in_ptr, pair_ptr, count_ptr, in_row_stride, t, n_chunks, n_cols, n_items, BLOCK: tl.constexpr,
                       KEEP_16: tl.constexpr, PUBLISH: tl.constexpr):
    """Item t's chunk max ``m``, ``e = exp(x - m)`` (kept), its pair published and counted in: ``(m, e, seen)``."""
    x = load_chunk(in_ptr, in_row_stride, t, n_chunks, n_cols, n_items, BLOCK)
    m = tl.max(x, axis=0)
    e = fast_exp(x - safe_shift(m))
    seen = 0
    if t < n_items:
        row = (t // n_chunks).to(tl.int64)
        if PUBLISH:
            pair = pair_ptr + 2 * (row * n_chunks + t % n_chunks)
            tl.store(pair, m)
            tl.store(pair + 1, tl.sum(e, axis=0))
        seen = count_in(count_ptr + 1 + row, n_chunks, PUBLISH, False)
    if KEEP_16:
        e = e.to(in_ptr.dtype.element_ty)
    return m, e, seen


@triton.jit
def write_chunk(out_ptr, pair_ptr, count_ptr, out_row_stride, t, m_t, e, seen, n_chunks, n_cols,
                BLOCK: tl.constexpr, CHUNKS: tl.constexpr):
    """Wait for item t's row, combine its pairs, write t's chunk from its ``e`` (still in registers)."""
    row = (t // n_chunks).to(tl.int64)
    wait_for_partners(count_ptr + 1 + row, seen, n_chunks)
    row_max, inv_total = row_state(pair_ptr, row, n_chunks, CHUNKS)
    cols = (t % n_chunks) * BLOCK + tl.arange(0, BLOCK)
    y = e.to(tl.float32) * (tl.exp(m_t - row_max) * inv_total)
    tl.store(out_ptr + row * out_row_stride + cols, y.to(out_ptr.dtype.element_ty), mask=cols < n_cols)


@triton.jit
def pipelined_softmax_kernel(out_ptr, in_ptr, pair_ptr, count_ptr, in_row_stride, out_row_stride, n_cols,
                             n_chunks, n_items, BLOCK: tl.constexpr, CHUNKS: tl.constexpr,
                             KEEP_16: tl.constexpr, PUBLISH: tl.constexpr, FINISH: tl.constexpr):
    if PUBLISH and FINISH:  # one launch: tickets in the order programs ask
        t = tl.atomic_add(count_ptr, 1, sem="relaxed")
        m_t, e, seen = reduce_and_publish(in_ptr, pair_ptr, count_ptr, in_row_stride, t, n_chunks, n_cols, n_items,
                                          BLOCK, KEEP_16, True)
        while t < n_items:
            # 1. The next item: load, reduce, publish and count in *before* waiting for this one's row.
            t_next = tl.atomic_add(count_ptr, 1, sem="relaxed")
            m_n, e_n, seen_n = reduce_and_publish(in_ptr, pair_ptr, count_ptr, in_row_stride, t_next, n_chunks,
                                                  n_cols, n_items, BLOCK, KEEP_16, True)
            # 2. Wait for this item's row, combine its pairs, write this chunk from registers.
            write_chunk(out_ptr, pair_ptr, count_ptr, out_row_stride, t, m_t, e, seen, n_chunks, n_cols, BLOCK, CHUNKS)
            t, m_t, e, seen = t_next, m_n, e_n, seen_n
    else:  # two launches: the first publishes every item, the second writes them (its waits pass at once)
        for t in range(tl.program_id(0), n_items, tl.num_programs(0)):
            m_t, e, seen = reduce_and_publish(in_ptr, pair_ptr, count_ptr, in_row_stride, t, n_chunks, n_cols,
                                              n_items, BLOCK, KEEP_16, PUBLISH)
            if FINISH:
                write_chunk(out_ptr, pair_ptr, count_ptr, out_row_stride, t, m_t, e, seen, n_chunks, n_cols, BLOCK,
                            CHUNKS)


def pipelined_softmax(x: torch.Tensor, out: torch.Tensor | None = None, BLOCK: int | None = None,
                      num_warps: int | None = None, keep_16: bool = False, programs: int | None = None,
                      one_launch: bool | None = None) -> torch.Tensor:
    """Softmax over the last dim of 2-D ``x``, each row shared by ``cdiv(n_cols, BLOCK)`` chunks, worked
    through by a fixed set of programs that load and publish their next chunk before they wait. Knobs:
    ``BLOCK``, ``num_warps``, ``keep_16`` (as in ``cooperative_softmax``), ``programs`` (default: as many as
    the GPU holds at once; 4 per SM in the interpreter), ``one_launch`` (default: on a GPU when every program
    is resident and a row has no more chunks than programs)."""
    x, y = prepare(x, out, BLOCK=BLOCK, num_warps=num_warps, programs=programs)
    n_rows, n_cols = x.shape
    if x.numel() == 0:
        return y
    BLOCK = BLOCK or default_block(n_cols, x.element_size(), COOPERATIVE_BYTES // 2)
    n_chunks = cdiv(n_cols, BLOCK)
    n_items = n_rows * n_chunks
    if n_items >= 2**31:
        raise ValueError(f"pipelined_softmax takes fewer than 2**31 chunks; {n_rows} rows of {n_chunks} is more")
    pairs = torch.empty(2 * n_items, dtype=torch.float32, device=x.device)
    counts = torch.zeros(1 + n_rows, dtype=torch.int32, device=x.device)
    args = (y, x, pairs, counts, x.stride(0), y.stride(0), n_cols, n_chunks, n_items)
    knobs = dict(BLOCK=BLOCK, CHUNKS=next_power_of_2(n_chunks), KEEP_16=bool(keep_16) and x.element_size() == 2,
                 num_warps=num_warps or default_warps(BLOCK))
    on_gpu = x.device.type == "cuda"
    held = resident_programs(pipelined_softmax_kernel, args, (1,), x.device, PUBLISH=True, FINISH=True,
                             **knobs) if on_gpu else 0
    if one_launch and not on_gpu:
        raise ValueError("one_launch=True needs a GPU: the CPU interpreter runs programs one after another")
    resident = not programs or programs <= held  # one launch needs every program running at once
    n_programs = min(n_items, programs or held)
    if one_launch and not resident:
        raise ValueError(f"programs={programs} with one_launch=True: more than the GPU holds at once ({held})")
    if one_launch and n_chunks > n_programs:
        raise ValueError(f"one_launch=True with {n_chunks} chunks per row but {n_programs} programs: they would "
                         "wait for ever; use a larger BLOCK or more programs")
    if one_launch is None:
        one_launch = on_gpu and resident and n_chunks <= n_programs
    grid = (min(n_items, programs or (held if one_launch else 4 * num_sms(x.device))),)
    if one_launch:
        pipelined_softmax_kernel[grid](*args, PUBLISH=True, FINISH=True, **knobs)
    else:
        pipelined_softmax_kernel[grid](*args, PUBLISH=True, FINISH=False, **knobs)
        pipelined_softmax_kernel[grid](*args, PUBLISH=False, FINISH=True, **knobs)
    return y
