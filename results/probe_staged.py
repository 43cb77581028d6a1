"""A probe of issue 15's fourth session, kept as the record of what was measured (``h200-issue15d.json``); not part
of the package: on the H200 it was slower than the dispatcher's kernels on every shape (see results/README.md).

Staged softmax: chunks copied into shared memory by the TMA, the next ones on their way while one is computed.

``cooperative.py`` reads a row once, but each program's life is load, compute, wait, store: while it computes
or waits, its next bytes are not on their way. The fastest softmax kernels (QuACK) keep the memory system busy
with *asynchronous bulk copies*: Hopper's Tensor Memory Accelerator (TMA) copies a block from global into
shared memory by itself, while the threads work on the block before.

In Triton a TMA copy is a load through a *tensor descriptor* (``TensorDescriptor.from_tensor(x, [1, BLOCK])``:
base, shape, strides and block shape of ``x``). In a ``tl.range(..., num_stages=STAGES)`` loop, Triton's
pipeliner issues the descriptor loads of the next iterations early, into shared-memory buffers: the
chunk of iteration ``i + 1`` lands while iteration ``i`` computes. Here a fixed set of programs, all resident
at once (a cooperative launch), loop over the work items ``t = (row, chunk)``, item ``t`` by program
``t % programs``. For each item a program

1. takes its chunk from shared memory: ``e = exp(x - m)``, ``l = Σ e`` (lanes past the row's end read 0 from
   the TMA, so they are set to -inf first);
2. for a row of several chunks: publishes ``(m, l)`` as one 64-bit word, waits until every chunk of its row has
   published, and combines them (``row_state``);
3. writes ``y = e·exp(m - M) / L`` from registers.

**Why one 64-bit word.** A reader sees the whole word or the old one, so the word is its own "ready" flag (the
table starts as all ones; a published ``l >= 0`` never has those bits). No counter, no barrier between the
store and a flag: a barrier would stop Triton's pipeliner, and so does a loop inside the loop body, which is
why the wait is a short loop written in PTX (``wait_for_words``).

**No deadlock**, because every program is resident (the launch is cooperative: the driver refuses a grid that
does not fit at once) and a row has no more chunks than there are programs. Take the earliest item not yet
done: each chunk of its row belongs to a program that has finished its earlier items, so it has published,
and the wait ends. The CPU interpreter runs programs one after another: there (and with ``one_launch=False``)
two launches run the same loop, the first only publishes, the second finishes.

Needs what the TMA needs: a 16-byte aligned base and row stride (the dispatcher checks ``can_stage``).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from softmax_lab.kernels._launch import cdiv, next_power_of_2, prepare
from softmax_lab.kernels.combine import online_reduce, safe_shift
from softmax_lab.kernels.cooperative import resident_programs

STAGED_BYTES = 32768  # input per chunk (8192 fp32, 16384 fp16/bf16)
STAGED_BACKWARD_BYTES = 16384  # y per backward chunk (as much of dy again)

NOT_YET = -1  # a word not yet published: all 64 bits set
COOPERATIVE_LAUNCH = True  # ask the driver to start every program at once (or refuse the launch)


@triton.jit
def publish(word_ptr, m, l):
    """Store ``(m, l)`` as one 64-bit word: the bits of m in the high half, of l in the low half."""
    high = m.to(tl.int32, bitcast=True).to(tl.int64) << 32
    low = tl.abs(l).to(tl.int32, bitcast=True).to(tl.int64) & 0xFFFFFFFF  # abs: a NaN sum never looks NOT_YET
    tl.store(word_ptr, high | low)


@triton.jit
def wait_for_words(ptrs):
    """Each lane spins until its word is published (low half not all ones), then returns it."""
    return tl.inline_asm_elementwise(
        """{ .reg .pred p; .reg .b64 w; .reg .b32 lo, hi;
        WAIT: ld.relaxed.gpu.global.b64 w, [$1]; mov.b64 {lo, hi}, w; setp.eq.b32 p, lo, -1; @p bra WAIT;
        mov.b64 $0, w; }""",
        "=l,l", [ptrs], dtype=tl.int64, is_pure=False, pack=1)


@triton.jit
def row_words(words_ptr, n_chunks, CHUNKS: tl.constexpr, WAIT: tl.constexpr):
    """The words of a row's chunks (lanes past ``n_chunks``: 0), waiting for them with ``WAIT``."""
    c = tl.arange(0, CHUNKS)
    if WAIT:
        words = wait_for_words(words_ptr + tl.minimum(c, n_chunks - 1))
    else:  # the second of two launches: every word is there
        words = tl.load(words_ptr + c, mask=c < n_chunks, other=0)
    return tl.where(c < n_chunks, words, 0)


@triton.jit
def high(words):
    return (words >> 32).to(tl.int32).to(tl.float32, bitcast=True)


@triton.jit
def row_state(words_ptr, n_chunks, CHUNKS: tl.constexpr, WAIT: tl.constexpr):
    """``(row max, total)`` from the ``(m, l)`` words of a row's chunks."""
    words = row_words(words_ptr, n_chunks, CHUNKS, WAIT)
    c = tl.arange(0, CHUNKS)
    m_c = tl.where(c < n_chunks, high(words), float("-inf"))
    return online_reduce(m_c, words.to(tl.int32).to(tl.float32, bitcast=True))


@triton.jit
def staged_softmax_kernel(out_ptr, in_desc, word_ptr, out_row_stride, n_cols, n_chunks, n_items,
                          BLOCK: tl.constexpr, STAGES: tl.constexpr, CHUNKS: tl.constexpr,
                          PUBLISH: tl.constexpr, FINISH: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    for t in tl.range(tl.program_id(0), n_items, tl.num_programs(0), num_stages=STAGES):
        row = t // n_chunks
        first = (t % n_chunks) * BLOCK
        # 1. The chunk, from shared memory (a TMA copy started STAGES - 1 items ago).
        x = tl.reshape(in_desc.load([row, first]), [BLOCK]).to(tl.float32)
        x = tl.where(first + offs < n_cols, x, float("-inf"))
        m = tl.max(x, axis=0)
        e = tl.exp(x - safe_shift(m))  # an all -inf chunk: e = 0
        total = tl.sum(e, axis=0)
        if CHUNKS > 1:  # 2. Publish, wait for the row's other chunks, combine.
            if PUBLISH:
                publish(word_ptr + t, m, total)
            if FINISH:
                row_max, total = row_state(word_ptr + row * n_chunks, n_chunks, CHUNKS, PUBLISH)
                e = e * tl.exp(m - row_max)  # a row that is -inf everywhere gives NaN, like torch
        if FINISH:  # 3. Write once.
            y = e * (1.0 / total)
            tl.store(out_ptr + row.to(tl.int64) * out_row_stride + first + offs, y.to(out_ptr.dtype.element_ty),
                     mask=first + offs < n_cols)


@triton.jit
def staged_backward_kernel(dx_ptr, y_desc, dy_desc, word_ptr, dx_row_stride, n_cols, n_chunks, n_items,
                           BLOCK: tl.constexpr, STAGES: tl.constexpr, CHUNKS: tl.constexpr,
                           PUBLISH: tl.constexpr, FINISH: tl.constexpr):
    # The same loop for dx = y·(dy - Σ y·dy): chunks of y and dy come by TMA (past the end: 0, adding 0 to the
    # sum), each chunk publishes its share of the sum (high half; low half 0), waits for the others, writes dx.
    offs = tl.arange(0, BLOCK)
    for t in tl.range(tl.program_id(0), n_items, tl.num_programs(0), num_stages=STAGES):
        row = t // n_chunks
        first = (t % n_chunks) * BLOCK
        y = tl.reshape(y_desc.load([row, first]), [BLOCK]).to(tl.float32)
        dy = tl.reshape(dy_desc.load([row, first]), [BLOCK]).to(tl.float32)
        dot = tl.sum(y * dy, axis=0)
        if CHUNKS > 1:
            if PUBLISH:
                publish(word_ptr + t, dot, 0.0)
            if FINISH:
                dot = tl.sum(high(row_words(word_ptr + row * n_chunks, n_chunks, CHUNKS, PUBLISH)), axis=0)
        if FINISH:
            tl.store(dx_ptr + row.to(tl.int64) * dx_row_stride + first + offs, (y * (dy - dot)).to(
                dx_ptr.dtype.element_ty), mask=first + offs < n_cols)


def can_stage(x: torch.Tensor) -> bool:
    """The TMA can copy from ``x`` (2-D, contiguous rows): a 16-byte aligned base and row stride, on a GPU
    with a TMA (compute capability 9 or newer) or in the CPU interpreter."""
    if x.device.type == "cuda" and torch.cuda.get_device_capability(x.device)[0] < 9:
        return False
    return x.data_ptr() % 16 == 0 and (x.shape[0] <= 1 or x.stride(0) * x.element_size() % 16 == 0)


def staged_softmax(x: torch.Tensor, out: torch.Tensor | None = None, BLOCK: int | None = None,
                   STAGES: int = 2, num_warps: int | None = None, programs: int | None = None,
                   one_launch: bool | None = None) -> torch.Tensor:
    """Softmax over the last dim of 2-D ``x``, chunks of ``BLOCK`` elements copied by the TMA. Knobs: ``BLOCK``
    (power of two; default ``dispatch.STAGED_BYTES`` of input, or the whole row), ``STAGES`` (copies in
    flight + 1), ``num_warps``, ``programs`` (default: as many as the GPU holds at once; 4 in the
    interpreter), ``one_launch`` (default: on a GPU; False: the two-launch path the interpreter takes)."""
    x, y = prepare(x, out, BLOCK=BLOCK, STAGES=STAGES, num_warps=num_warps, programs=programs)
    n_rows, n_cols = x.shape
    if x.numel() == 0:
        return y
    if not can_stage(x):
        raise ValueError("staged_softmax needs a 16-byte aligned input and row stride (what the TMA copies), "
                         "and a GPU of compute capability 9 or newer: use cooperative_softmax")
    _run(staged_softmax_kernel, y, [x], n_rows, n_cols, BLOCK, STAGES, num_warps, programs, one_launch,
         STAGED_BYTES)
    return y


def staged_backward(y: torch.Tensor, dy: torch.Tensor, dx: torch.Tensor, BLOCK: int | None = None,
                    STAGES: int = 2, num_warps: int | None = None, programs: int | None = None,
                    one_launch: bool | None = None) -> torch.Tensor:
    """dx = y·(dy - Σ dy·y) with chunks of y and dy copied by the TMA (checked 2-D inputs with contiguous,
    ``can_stage`` rows; ``softmax_backward`` calls this for long rows)."""
    if y.numel():
        _run(staged_backward_kernel, dx, [y, dy], *y.shape, BLOCK, STAGES, num_warps, programs, one_launch,
             STAGED_BACKWARD_BYTES)
    return dx


def _descriptor(x: torch.Tensor, block: int) -> TensorDescriptor:
    n_rows, n_cols = x.shape
    size = x.element_size()
    stride = x.stride(0) if n_rows > 1 else cdiv(n_cols * size, 16) * 16 // size  # (one row: any aligned stride)
    return TensorDescriptor(x, [n_rows, n_cols], [stride, 1], [1, block])


def _run(kernel, out, inputs, n_rows, n_cols, BLOCK, STAGES, num_warps, programs, one_launch, chunk_bytes):
    size = inputs[0].element_size()
    BLOCK = BLOCK or min(next_power_of_2(n_cols), chunk_bytes // size)
    BLOCK = max(BLOCK, 16 // size)  # a TMA copy moves at least 16 bytes
    n_chunks = cdiv(n_cols, BLOCK)
    n_items = n_rows * n_chunks
    if n_items >= 2**31:
        raise ValueError(f"staged kernels take fewer than 2**31 chunks; {n_rows} rows of {n_chunks} is more")
    words = torch.full((n_items if n_chunks > 1 else 1,), NOT_YET, dtype=torch.int64, device=out.device)
    args = (out, *[_descriptor(x, BLOCK) for x in inputs], words, out.stride(0), n_cols, n_chunks, n_items)
    knobs = dict(BLOCK=BLOCK, STAGES=STAGES, CHUNKS=next_power_of_2(n_chunks),
                 num_warps=num_warps or max(1, min(16, BLOCK * size // 2048)))  # 2 KB of input per warp
    on_gpu = out.device.type == "cuda"
    if one_launch and not on_gpu:
        raise ValueError("one_launch=True needs a GPU: the CPU interpreter runs programs one after another, "
                         "so a program would wait for ever for partners that have not run")
    held = resident_programs(kernel, args, (1,), out.device, PUBLISH=True, FINISH=True, **knobs) if on_gpu else 4
    grid = min(n_items, programs or held)
    if on_gpu and grid > held:
        raise ValueError(f"programs={programs} is more than the GPU holds at once ({held}) for these knobs")
    if one_launch is None:
        one_launch = on_gpu
    if one_launch and n_chunks > grid:
        raise ValueError(f"{n_chunks} chunks per row but {grid} programs: a program would wait for a chunk that "
                         "no program can take yet; use a larger BLOCK or more programs")
    if one_launch or n_chunks == 1:
        extra = dict(launch_cooperative_grid=True) if on_gpu and COOPERATIVE_LAUNCH and n_chunks > 1 else {}
        kernel[(grid,)](*args, PUBLISH=True, FINISH=True, **extra, **knobs)
    else:
        kernel[(grid,)](*args, PUBLISH=True, FINISH=False, **knobs)
        kernel[(grid,)](*args, PUBLISH=False, FINISH=True, **knobs)
