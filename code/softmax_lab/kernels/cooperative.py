"""Cooperative softmax: a long row shared by a group of programs that keep their pieces on chip.

A row too long for one program's registers (65536 fp32 = 256 KB; a multiprocessor has 256 KB of registers
in all) is cut into G chunks of BLOCK elements, one program each. Every program

1. loads its chunk once and keeps ``e = exp(x - m_c)`` in registers (``m_c``: the chunk's max);
2. publishes its chunk's pair ``(m_c, l_c = Σ e)`` in a small table in global memory, then counts itself
   in on its row's counter (an atomic add);
3. waits until the counter says all G programs of its row have published, and combines the row's pairs:
   ``M = max m_c``, ``L = Σ l_c·exp(m_c - M)``;
4. writes ``y = e·exp(m_c - M) / L`` straight from registers.

One read and one write per element, like the fused kernel; online and split-row read the row twice
(3 units of traffic for 2: about 67% of copy speed when the second read misses the L2 cache).

**Waiting is safe only if every partner can run.** A GPU starts programs as room frees up, in no promised
order. If programs waited for partners chosen by ``program_id``, the GPU could fill up with programs whose
partners have not started, and wait forever. So each program first takes a *ticket* (an atomic counter) and
uses it, not ``program_id``, to pick its (row, chunk): tickets go out in the order programs really start.
Then only the newest row can have partners still to start, and they start as soon as one program finishes,
provided a whole group fits on the GPU at once (G <= programs resident at once; the launcher checks).

**The CPU interpreter runs programs one after another**, so the first would wait for ever for the second.
There (and with ``one_launch=False``) the launcher runs the same kernel twice: a first launch where every
program only publishes, a second where every program reloads its chunk and finishes; its wait passes at once.

**Rows longer than the GPU's registers** (16 rows of 1M fp32 = 64 MB, against 132 x 256 KB of registers): with
``tiles > 1`` each program streams ``tiles - 1`` tiles before its last one, and reads them again after the
wait, hoping they are still in the L2 cache.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .tuning import COOPERATIVE_BACKWARD_BYTES, COOPERATIVE_BYTES, COOPERATIVE_WARPS, pick
from ._launch import backward_inputs, cdiv, check_knobs, next_power_of_2, prepare, row_vector, scratch
from .combine import online_combine, online_reduce, safe_shift
from .fast_exp import fast_exp


@triton.jit
def take_ticket(count_ptr, ONE_LAUNCH: tl.constexpr):
    """Which piece of work this program does: a ticket in start order (one launch), else program_id.
    The program with the last ticket sets the counter back to 0 (every other ticket is taken by then), so
    the next launch finds it zeroed."""
    if ONE_LAUNCH:
        t = tl.atomic_add(count_ptr, 1, sem="relaxed")
        if t == tl.num_programs(0) - 1:
            tl.atomic_xchg(count_ptr, 0, sem="relaxed")
        return t
    return tl.program_id(0)


@triton.jit
def count_in(arrived_ptr, n_chunks, PUBLISH: tl.constexpr, RESET: tl.constexpr = True):
    """Count this program in on its row's counter (after its pair is stored); returns the count it saw. The last
    of the row's programs in sets the counter back to 0: its partners then read 0 or ``n_chunks``, and both mean
    "all are in". So a finished launch leaves its counters at 0, and the next launch on the stream reuses them
    (``_launch.scratch``) instead of zeroing new ones each call. (``RESET=False``: counters left as they are,
    for ``pipelined.py``, which zeroes new ones each call.)"""
    if PUBLISH:
        tl.debug_barrier()  # every thread's stores are done before the counter says so
        seen = tl.atomic_add(arrived_ptr, 1, sem="acq_rel") + 1  # release: our pair is visible first
        if RESET:
            if seen == n_chunks:
                tl.atomic_xchg(arrived_ptr, 0, sem="acq_rel")  # (after the others' releases: passes them on)
        return seen
    return tl.atomic_add(arrived_ptr, 0, sem="acquire")


@triton.jit
def wait_for_partners(arrived_ptr, seen, n_chunks):
    while (seen > 0) & (seen < n_chunks):  # 0: the last partner in has set the counter back (see count_in)
        seen = tl.atomic_add(arrived_ptr, 0, sem="acquire")  # acquire: then their pairs are visible


@triton.jit
def count_in_and_wait(arrived_ptr, n_chunks, PUBLISH: tl.constexpr, FINISH: tl.constexpr):
    seen = count_in(arrived_ptr, n_chunks, PUBLISH)
    if FINISH:
        wait_for_partners(arrived_ptr, seen, n_chunks)


@triton.jit
def row_state(pair_ptr, row, n_chunks, CHUNKS: tl.constexpr):
    """Combine the ``(m, l)`` pairs that a row's programs published: ``(row max, 1 / total)``."""
    c = tl.arange(0, CHUNKS)
    pairs = pair_ptr + 2 * (row * n_chunks + c)
    m_c = tl.load(pairs, mask=c < n_chunks, other=float("-inf"), volatile=True)  # volatile: not from L1
    l_c = tl.load(pairs + 1, mask=c < n_chunks, other=0.0, volatile=True)
    row_max, total = online_reduce(m_c, l_c)  # a row that is -inf everywhere gives NaN, like torch
    return row_max, 1.0 / total


@triton.jit
def cooperative_softmax_kernel(out_ptr, in_ptr, pair_ptr, count_ptr, in_row_stride, out_row_stride, n_cols,
                               n_chunks, BLOCK: tl.constexpr, TILES: tl.constexpr, CHUNKS: tl.constexpr,
                               KEEP_16: tl.constexpr, PUBLISH: tl.constexpr, FINISH: tl.constexpr,
                               VEC: tl.constexpr = 1):
    in_row_stride, out_row_stride, n_cols = in_row_stride * VEC, out_row_stride * VEC, n_cols * VEC  # (fused.py)
    t = take_ticket(count_ptr, PUBLISH and FINISH)
    row = (t // n_chunks).to(tl.int64)  # int64: row * stride can pass 2**31
    chunk = t % n_chunks
    in_row = in_ptr + row * in_row_stride
    out_row = out_ptr + row * out_row_stride
    first = tl.multiple_of(chunk * (TILES * BLOCK), BLOCK)  # a chunk is TILES tiles of BLOCK elements
    offs = tl.arange(0, BLOCK)
    # 1. The chunk's (m, l). With TILES > 1 (very long rows) the first tiles stream through as in online
    #    softmax and are read again at step 4 (from the L2 cache by then, with luck).
    m = tl.full([], float("-inf"), tl.float32)
    l = tl.full([], 0.0, tl.float32)
    for i in range(TILES - 1):
        tile = first + i * BLOCK + offs
        xt = tl.load(in_row + tile, mask=tile < n_cols, other=float("-inf"),
                     eviction_policy="evict_last").to(tl.float32)
        m_t = tl.max(xt, axis=0)
        m, l = online_combine(m, l, m_t, tl.sum(fast_exp(xt - safe_shift(m_t)), axis=0))
    #    The last tile is read once and stays in registers as e = exp(x - m_t) (an all -inf tile: e = 0);
    #    KEEP_16 keeps e in the input's 16-bit dtype, half the registers, so twice the elements fit.
    cols = first + (TILES - 1) * BLOCK + offs
    x = tl.load(in_row + cols, mask=cols < n_cols, other=float("-inf")).to(tl.float32)
    m_t = tl.max(x, axis=0)
    e = fast_exp(x - safe_shift(m_t))
    m, l = online_combine(m, l, m_t, tl.sum(e, axis=0))
    if KEEP_16:
        e = e.to(in_ptr.dtype.element_ty)
    # 2. Publish (m, l) and count in; 3. wait for the partners and combine the row's pairs.
    pair = pair_ptr + 2 * (row * n_chunks + chunk)
    if PUBLISH:
        tl.store(pair, m)
        tl.store(pair + 1, l)
    count_in_and_wait(count_ptr + 1 + row, n_chunks, PUBLISH, FINISH)
    if FINISH:
        row_max, inv_total = row_state(pair_ptr, row, n_chunks, CHUNKS)
        # 4. Normalise and write once: the streamed tiles read again, the last one from registers.
        for i in range(TILES - 1):
            tile = first + i * BLOCK + offs
            xt = tl.load(in_row + tile, mask=tile < n_cols, other=float("-inf"),
                         eviction_policy="evict_first").to(tl.float32)
            yt = fast_exp(xt - row_max) * inv_total
            tl.store(out_row + tile, yt.to(out_ptr.dtype.element_ty), mask=tile < n_cols)
        y = e.to(tl.float32) * (tl.exp(m_t - row_max) * inv_total)
        tl.store(out_row + cols, y.to(out_ptr.dtype.element_ty), mask=cols < n_cols)


@triton.jit
def cooperative_backward_kernel(dx_ptr, y_ptr, dy_ptr, dot_ptr, count_ptr, y_row_stride, dy_row_stride,
                                dx_row_stride, n_cols, n_chunks, BLOCK: tl.constexpr, CHUNKS: tl.constexpr,
                                PUBLISH: tl.constexpr, FINISH: tl.constexpr, VEC: tl.constexpr = 1):
    # The same pattern for dx = y·(dy - Σ dy·y): each program keeps its chunks of y and dy in registers,
    # publishes its share of Σ dy·y, waits for the row's other shares, and writes its chunk of dx.
    y_row_stride, dy_row_stride, dx_row_stride = y_row_stride * VEC, dy_row_stride * VEC, dx_row_stride * VEC
    n_cols = n_cols * VEC
    t = take_ticket(count_ptr, PUBLISH and FINISH)
    row = (t // n_chunks).to(tl.int64)
    chunk = t % n_chunks
    cols = tl.multiple_of(chunk * BLOCK, BLOCK) + tl.arange(0, BLOCK)
    mask = cols < n_cols
    y = tl.load(y_ptr + row * y_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    dy = tl.load(dy_ptr + row * dy_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    if PUBLISH:
        tl.store(dot_ptr + row * n_chunks + chunk, tl.sum(dy * y, axis=0))
    count_in_and_wait(count_ptr + 1 + row, n_chunks, PUBLISH, FINISH)
    if FINISH:
        c = tl.arange(0, CHUNKS)
        dot = tl.sum(tl.load(dot_ptr + row * n_chunks + c, mask=c < n_chunks, other=0.0, volatile=True), axis=0)
        tl.store(dx_ptr + row * dx_row_stride + cols, (y * (dy - dot)).to(dx_ptr.dtype.element_ty), mask=mask)


# Programs of one compiled kernel that the GPU holds at once, by kernel, device, knobs and argument kinds.
_RESIDENT: dict = {}


def _kind(arg):
    if isinstance(arg, torch.Tensor):
        return arg.dtype, arg.data_ptr() % 16 == 0
    if isinstance(arg, int):
        return arg % 16 == 0, arg == 1
    # a tensor descriptor (TMA kernels take them)
    return type(arg).__name__, str(getattr(arg, "base", arg).dtype), tuple(getattr(arg, "block_shape", ()))


def resident_programs(kernel, args, grid, device, **knobs) -> int:
    """How many programs of ``kernel`` (compiled for these arguments) the GPU holds at once, from its
    registers, threads and shared memory per program (the CUDA occupancy rule)."""
    # Triton compiles one kernel per dtype, per "divisible by 16" for pointers and ints, per "int == 1": so
    # does this table, so that its count is that of the kernel that will run.
    key = (kernel.fn.__name__, device.index, tuple(sorted(knobs.items())), tuple(_kind(a) for a in args))
    if key not in _RESIDENT:
        compiled = kernel.warmup(*args, grid=grid, **knobs)
        if compiled is None:  # nothing compiled (memcount's counting interpreter): take the two-launch path
            return 0
        compiled._init_handles()
        props = torch.cuda.get_device_properties(device)
        warps = compiled.metadata.num_warps
        regs_per_warp = -(-max(compiled.n_regs, 1) * 32 // 256) * 256  # registers are given out in 256s
        by_regs = (props.regs_per_multiprocessor // regs_per_warp) // warps
        by_threads = props.max_threads_per_multi_processor // (32 * warps)
        smem = compiled.metadata.shared + 1024  # + 1 KB the driver keeps per program
        by_smem = props.shared_memory_per_multiprocessor // smem
        _RESIDENT[key] = min(by_regs, by_threads, by_smem, 32) * props.multi_processor_count
    return _RESIDENT[key]


def default_block(n_cols: int, element_size: int, per_program: int = COOPERATIVE_BYTES) -> int:
    """``per_program`` bytes of input per program (``tuning.COOPERATIVE_BYTES``: 8192 fp32 or 16384
    fp16/bf16), or the whole row when it is shorter."""
    return min(next_power_of_2(n_cols), per_program // element_size)


def default_warps(block: int) -> int:
    return pick(COOPERATIVE_WARPS, block)  # 32 elements per thread


def _launch(kernel, grid, args, n_chunks, one_launch, device, counts_at=3, **knobs):
    """One launch when the GPU can hold a whole group (else two; always two in the CPU interpreter). ``args``
    hold the counters (``_launch.scratch``) at ``counts_at``; two launches take new ones, zeroed: another
    thread's launches on the stream could fall between them."""
    if one_launch is None:
        one_launch = device.type == "cuda" and n_chunks <= resident_programs(
            kernel, args, grid, device, PUBLISH=True, FINISH=True, **knobs)
    elif one_launch and device.type != "cuda":
        raise ValueError("one_launch=True needs a GPU: the CPU interpreter runs programs one after another, "
                         "so the first would wait for ever for its partners")
    elif one_launch and n_chunks > resident_programs(kernel, args, grid, device, PUBLISH=True, FINISH=True,
                                                     **knobs):
        raise ValueError(f"one_launch=True with {n_chunks} programs per row, more than the GPU holds at once: "
                         "they would wait for ever; use a larger BLOCK or one_launch=None")
    if one_launch:
        kernel[grid](*args, PUBLISH=True, FINISH=True, **knobs)
    else:
        counts = torch.zeros_like(args[counts_at])
        args = (*args[:counts_at], counts, *args[counts_at + 1:])
        kernel[grid](*args, PUBLISH=True, FINISH=False, **knobs)
        kernel[grid](*args, PUBLISH=False, FINISH=True, **knobs)


def run_setup(setup, device, one_launch=None, counts_at=3) -> None:
    """Launch what a ``launch_setup`` returned: the kernel alone when it takes no scratch (``sizes`` None), else
    a row's cooperating programs (``_launch``; its counters at ``args[counts_at]``)."""
    kernel, grid, args, options, sizes, _ = setup
    if sizes is None:
        kernel[grid](*args, **options)
        return
    options = dict(options)
    _launch(kernel, grid, args, options.pop("n_chunks"), one_launch, device, counts_at, **options)


def fits(kernel, grid, args, n_chunks, device, **options) -> bool:
    """Whether a row's ``n_chunks`` programs are all on the GPU at once, so that one launch may wait."""
    return device.type == "cuda" and n_chunks <= resident_programs(kernel, args, grid, device, PUBLISH=True,
                                                                   FINISH=True, **options)


def launch_setup(y, x, BLOCK=None, num_warps=None, tiles=1, keep_16=False):
    """``(kernel, grid, args, options, sizes, one)`` of ``cooperative_softmax``'s launch for checked x and y, as
    the dispatcher's plans reuse it: ``args[2:4]`` are this stream's scratch (``sizes``: the floats and counters
    the launch uses of it), ``options`` hold ``n_chunks`` (not a kernel argument), ``one``: one launch fits."""
    n_rows, n_cols = x.shape
    BLOCK = BLOCK or default_block(n_cols, x.element_size())
    n_chunks = cdiv(n_cols, BLOCK * tiles)
    if n_rows * n_chunks >= 2**31:
        raise ValueError(f"cooperative_softmax takes fewer than 2**31 programs; {n_rows} rows of {n_chunks} "
                         "chunks is more: use a larger BLOCK")
    sizes = (2 * n_rows * n_chunks, 1 + n_rows)
    pairs, counts = scratch(x.device, *sizes)  # counts: the ticket, then one per row
    vec = row_vector(n_cols, x, y)  # rows of whole 16-byte vectors: the ints go in vectors (fused.py)
    args = (y, x, pairs, counts, x.stride(0) // vec, y.stride(0) // vec, n_cols // vec, n_chunks)
    options = dict(BLOCK=BLOCK, TILES=tiles, CHUNKS=next_power_of_2(n_chunks),
                   KEEP_16=bool(keep_16) and x.element_size() == 2, VEC=vec,
                   num_warps=num_warps or default_warps(BLOCK))
    grid = (n_rows * n_chunks,)
    one = fits(cooperative_softmax_kernel, grid, args, n_chunks, x.device, **options)
    return cooperative_softmax_kernel, grid, args, dict(options, n_chunks=n_chunks), sizes, one


def cooperative_softmax(x: torch.Tensor, out: torch.Tensor | None = None, BLOCK: int | None = None,
                        num_warps: int | None = None, tiles: int = 1, one_launch: bool | None = None,
                        keep_16: bool = False) -> torch.Tensor:
    """Softmax over the last dim of 2-D ``x``, each row shared by ``cdiv(n_cols, BLOCK * tiles)``
    cooperating programs. Knobs: ``BLOCK`` (elements per tile, power of two), ``num_warps``, ``tiles``
    (tiles per program; all but the last are read twice, the second time from L2 if it still holds them),
    ``one_launch`` (default: on a GPU when a row's group fits on it at once; False: the two-launch path
    that the CPU interpreter always takes), ``keep_16`` (fp16/bf16 input: hold exp(x - m) in 16 bits while
    waiting, half the registers; it is rounded twice, within one 16-bit ulp)."""
    x, y = prepare(x, out, BLOCK=BLOCK, num_warps=num_warps, tiles=tiles)
    if x.numel() == 0:
        return y
    run_setup(launch_setup(y, x, BLOCK, num_warps, tiles, keep_16), x.device, one_launch)
    return y


def backward_setup(dx, y, dy, BLOCK=None, num_warps=None):
    """``launch_setup`` for ``cooperative_backward`` (``args[3:5]``: the scratch)."""
    n_rows, n_cols = y.shape
    BLOCK = BLOCK or default_block(n_cols, y.element_size(), COOPERATIVE_BACKWARD_BYTES)  # y and dy
    n_chunks = cdiv(n_cols, BLOCK)
    sizes = (n_rows * n_chunks, 1 + n_rows)
    dot, counts = scratch(y.device, *sizes)
    vec = row_vector(n_cols, y, dy, dx)
    args = (dx, y, dy, dot, counts, *[t.stride(0) // vec for t in (y, dy, dx)], n_cols // vec, n_chunks)
    options = dict(BLOCK=BLOCK, CHUNKS=next_power_of_2(n_chunks), VEC=vec,
                   num_warps=num_warps or default_warps(BLOCK))
    grid = (n_rows * n_chunks,)
    one = fits(cooperative_backward_kernel, grid, args, n_chunks, y.device, **options)
    return cooperative_backward_kernel, grid, args, dict(options, n_chunks=n_chunks), sizes, one


def cooperative_backward(y: torch.Tensor, dy: torch.Tensor, dx: torch.Tensor | None = None, BLOCK: int | None = None,
                         num_warps: int | None = None, one_launch: bool | None = None) -> torch.Tensor:
    """dx = y·(dy - Σ dy·y) over the last dim of 2-D ``y`` and ``dy``, each row shared by cooperating programs of
    ``BLOCK`` elements (``softmax_backward`` calls this for long rows). ``dx``: where it goes, checked as
    ``softmax_backward``'s ``out`` (None: a new tensor)."""
    check_knobs(BLOCK=BLOCK, num_warps=num_warps)
    y, dy, dx = backward_inputs(y, dy, dx)
    if y.numel():
        run_setup(backward_setup(dx, y, dy, BLOCK, num_warps), y.device, one_launch, counts_at=4)
    return dx
