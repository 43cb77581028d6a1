"""L2 re-read softmax: cooperating programs that keep nothing in registers across the wait, but in the L2 cache.

``cooperative.py`` keeps each program's chunk in registers while the program waits for its row's partners,
so a chunk is at most what one program's registers hold, and rows longer than all the GPU's registers
(16 rows of 1M fp32 = 64 MB) go in waves whose first programs wait for the last ones. Here a fixed set of
``P`` programs (no more than the GPU holds at once, so every partner is running) loops over the work items
``(row, chunk)``, item ``t`` going to program ``t % P``. For each item a program

1. streams its chunk tile by tile (read 1, from HBM) into the chunk's ``(m, l)``, publishes the pair and
   counts in on the row's counter, as in ``cooperative.py``;
2. does step 1 for its **next** item, so that its loads keep the memory busy while the partners catch up;
3. waits for the partners of the first item's row, combines the row's pairs, then reads the chunk again
   (read 2: from L2, as long as the ``2 x P`` chunks in flight fit in it, as the dispatcher's knobs make
   them; a row longer than the L2 cannot fit, and its read 2 comes from HBM) and writes
   ``exp(x - M) / L``.

HBM sees one read and one write per element; the registers hold only one tile, so tiles and chunks can be
large. **No deadlock** when a row has no more chunks than there are programs: a program waits only on its
oldest item, after publishing the next one, which is in a later row; so the earliest row waited on has all
its chunks published (the same argument as ``pipelined.py``). The CPU interpreter runs programs one after
another: there (and with ``one_launch=False``) a first launch only publishes and a second only finishes.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .tuning import COOPERATIVE_WARPS, L2_REREAD_BYTES, L2_REREAD_PROGRAMS_PER_SM, STREAM_BLOCK, pick
from ._launch import cdiv, next_power_of_2, num_sms, prepare, scratch
from .combine import online_combine, safe_shift
from .cooperative import count_in, resident_programs, row_state, wait_for_partners
from .fast_exp import fast_exp


@triton.jit
def publish_chunk_state(in_ptr, pair_ptr, count_ptr, in_row_stride, t, n_chunks, n_cols,
                        BLOCK: tl.constexpr, TILES: tl.constexpr):
    """Read 1 of item t: stream its chunk, store the chunk's (m, l) and count in on its row's counter."""
    row = (t // n_chunks).to(tl.int64)  # int64: row * stride can pass 2**31
    chunk = t % n_chunks
    first = chunk * (TILES * BLOCK)
    m = tl.full([], float("-inf"), tl.float32)
    l = tl.full([], 0.0, tl.float32)
    for i in range(TILES):
        cols = first + i * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(in_ptr + row * in_row_stride + cols, mask=cols < n_cols, other=float("-inf"),
                    eviction_policy="evict_last").to(tl.float32)  # evict_last: keep it in L2 for read 2
        m_t = tl.max(x, axis=0)
        m, l = online_combine(m, l, m_t, tl.sum(fast_exp(x - safe_shift(m_t)), axis=0))
    pair = pair_ptr + 2 * (row * n_chunks + chunk)
    tl.store(pair, m)
    tl.store(pair + 1, l)
    count_in(count_ptr + 1 + row, n_chunks, True)


@triton.jit
def l2_reread_softmax_kernel(out_ptr, in_ptr, pair_ptr, count_ptr, in_row_stride, out_row_stride, n_cols,
                             n_chunks, n_items, BLOCK: tl.constexpr, TILES: tl.constexpr, CHUNKS: tl.constexpr,
                             PUBLISH: tl.constexpr, FINISH: tl.constexpr):
    t = tl.program_id(0)
    if PUBLISH:
        publish_chunk_state(in_ptr, pair_ptr, count_ptr, in_row_stride, t, n_chunks, n_cols, BLOCK, TILES)
    while t < n_items:
        t_next = t + tl.num_programs(0)
        if PUBLISH:  # 2. the next item's read 1 goes out before this item's wait
            if t_next < n_items:
                publish_chunk_state(in_ptr, pair_ptr, count_ptr, in_row_stride, t_next, n_chunks, n_cols, BLOCK,
                                    TILES)
        if FINISH:  # 3. wait for this item's row, then read 2 (from L2) and write
            row = (t // n_chunks).to(tl.int64)
            arrived = count_ptr + 1 + row
            wait_for_partners(arrived, tl.atomic_add(arrived, 0, sem="acquire"), n_chunks)
            row_max, inv_total = row_state(pair_ptr, row, n_chunks, CHUNKS)
            first = (t % n_chunks) * (TILES * BLOCK)
            for i in range(TILES):
                cols = first + i * BLOCK + tl.arange(0, BLOCK)
                x = tl.load(in_ptr + row * in_row_stride + cols, mask=cols < n_cols, other=float("-inf"),
                            eviction_policy="evict_first").to(tl.float32)
                y = fast_exp(x - row_max) * inv_total
                tl.store(out_ptr + row * out_row_stride + cols, y.to(out_ptr.dtype.element_ty), mask=cols < n_cols)
        t = t_next


def launch_setup(y, x, BLOCK=None, num_warps=None, tiles=None, programs=None):
    """``(kernel, grid, args, options, sizes, one)`` of ``l2_reread_softmax``'s launch for checked x and y, as in
    ``cooperative.launch_setup`` (``args[2:4]``: this stream's scratch; ``one``: one launch fits)."""
    n_rows, n_cols = x.shape
    BLOCK = BLOCK or min(next_power_of_2(n_cols), STREAM_BLOCK)
    num_warps = num_warps or pick(COOPERATIVE_WARPS, BLOCK)
    on_gpu = x.device.type == "cuda"
    want = programs or L2_REREAD_PROGRAMS_PER_SM * num_sms(x.device)
    if tiles is None:  # as many tiles as the L2 budget allows, and enough that a row fits the programs
        by_l2 = max(1, L2_REREAD_BYTES // (2 * want * BLOCK * x.element_size()))
        tiles = max(1, min(by_l2, cdiv(n_cols, BLOCK)), cdiv(n_cols, BLOCK * want))
    n_chunks = cdiv(n_cols, BLOCK * tiles)
    n_items = n_rows * n_chunks
    if n_items + want >= 2**31:  # item numbers (int32) go up to n_items + programs
        raise ValueError(f"l2_reread_softmax takes fewer than 2**31 chunks; {n_rows} rows of {n_chunks} is more")
    sizes = (2 * n_items, 1 + n_rows)
    pairs, counts = scratch(x.device, *sizes)  # counts: [unused, then one per row]
    args = (y, x, pairs, counts, x.stride(0), y.stride(0), n_cols, n_chunks, n_items)
    knobs = dict(BLOCK=BLOCK, TILES=tiles, CHUNKS=next_power_of_2(n_chunks), num_warps=num_warps)
    held = resident_programs(l2_reread_softmax_kernel, args, (1,), x.device, PUBLISH=True, FINISH=True,
                             **knobs) if on_gpu else 0
    grid = (min(n_items, want, held) if held else min(n_items, want),)
    fits = on_gpu and held > 0 and want <= held and n_chunks <= grid[0]
    return l2_reread_softmax_kernel, grid, args, dict(knobs, n_chunks=n_chunks), sizes, fits


def l2_reread_softmax(x: torch.Tensor, out: torch.Tensor | None = None, BLOCK: int | None = None,
                      num_warps: int | None = None, tiles: int | None = None, programs: int | None = None,
                      one_launch: bool | None = None) -> torch.Tensor:
    """Softmax over the last dim of 2-D ``x``: each row cut into chunks of ``tiles`` tiles of ``BLOCK``
    elements, worked through by ``programs`` programs that read each chunk twice, the second time from L2.
    Defaults: ``BLOCK`` = ``tuning.STREAM_BLOCK`` (or the row, if shorter), ``programs`` =
    ``tuning.L2_REREAD_PROGRAMS_PER_SM`` per SM (at most what the GPU holds at once), ``tiles`` = the most
    that keeps the ``2 x programs`` chunks in flight within ``tuning.L2_REREAD_BYTES`` (at least 1, and
    enough that a row has no more chunks than there are programs). ``one_launch``: as in
    ``cooperative_softmax`` (default: on a GPU when a row's chunks fit the programs)."""
    x, y = prepare(x, out, BLOCK=BLOCK, num_warps=num_warps, tiles=tiles, programs=programs)
    n_rows, n_cols = x.shape
    if x.numel() == 0:
        return y
    on_gpu = x.device.type == "cuda"
    if one_launch and not on_gpu:
        raise ValueError("one_launch=True needs a GPU: the CPU interpreter runs programs one after another, "
                         "so the first would wait for ever for its partners")
    kernel, grid, args, knobs, _, fits = launch_setup(y, x, BLOCK, num_warps, tiles, programs)
    n_chunks = knobs.pop("n_chunks")
    if one_launch and not fits:
        raise ValueError(f"one_launch=True needs every program resident and a row's {n_chunks} chunks no more "
                         f"than the {grid[0]} programs: use fewer programs or more tiles")
    if one_launch is None:
        one_launch = fits
    if one_launch:
        l2_reread_softmax_kernel[grid](*args, PUBLISH=True, FINISH=True, **knobs)
    else:  # new counters: another thread's launches on the stream could fall between the two
        args = (*args[:3], torch.zeros_like(args[3]), *args[4:])
        l2_reread_softmax_kernel[grid](*args, PUBLISH=True, FINISH=False, **knobs)
        l2_reread_softmax_kernel[grid](*args, PUBLISH=False, FINISH=True, **knobs)
    return y
