"""Softmax backward kernels, dx = y·(dy - Σ dy·y), for short and long rows (``op.SoftmaxFunction``: in a model).

With y = softmax(x) and the incoming gradient dy, the gradient is, per row,

    dx = y · (dy - Σ dy·y)

(the Jacobian of softmax is diag(y) - y yᵀ). ``softmax_backward_kernel`` holds ROWS whole rows in one
[ROWS, BLOCK] tile (rows up to ``tuning.BACKWARD_TILE_COLS``). Longer rows are shared by cooperating
programs that keep their chunks of y and dy in registers (``cooperative.py``): one read of each, one write. On a
Hopper GPU, rows of whole 16-byte vectors (16-bit rows of 16,384-262,144 elements, fp32 ones of 16,385-163,840)
go to a cluster of programs whose shared memory TMA fills with y and dy (``clustered_tma_backward.py``); other
rows whose y and dy fit one program's shared memory (16-bit rows up to 57,337 elements, fp32 ones off whole vectors
up to 28,669) keep them there (``resident_backward.py``, persistent programs); ``clustered_backward.py`` (copies by
``cp.async``) takes rows of whole vectors from 65,536 to 151,936 elements that the TMA kernel refuses (a cluster of
16 that does not fit the GPU).
Asking for ``chunks`` picks the older two-launch path instead, as in split-row softmax: ``chunk_dot_kernel``
writes each chunk's share of Σ dy·y, ``chunk_apply_kernel`` adds the shares, reads y and dy again and
writes dx. Rows that do not start on 16 bytes (odd widths) go to ``unaligned.py``'s forms of both, which read
whole 16-byte vectors from the boundary before each row, when no knob is given.
"""
import torch
import triton
import triton.language as tl

from .tuning import (BACKWARD_TILE, BACKWARD_TILE_COLS, CHUNKED_BACKWARD_BLOCK, CLUSTERED_BACKWARD, GLUON_CAPABILITY,
                     RESIDENT_BACKWARD, RESIDENT_BACKWARD_LINE, RESIDENT_BACKWARD_WHOLE_VECTORS, TMA_BACKWARD,
                     TMA_BACKWARD_FLAT, element_size, pick)
from ._launch import (backward_inputs, cdiv, check_knobs, default_num_warps, device_limits, next_power_of_2, row_vector,
                      split_in_chunks)
from .clustered import PORTABLE_PARTS
from .clustered_backward import launch_setup as clustered_backward_setup  # (Gluon: GPU only)
from .clustered_backward import refusal as clustered_refusal
from .clustered_tma_backward import launch_setup as tma_backward_setup  # (Gluon: GPU only)
from .clustered_tma_backward import is_flat
from .clustered_tma_backward import refusal as tma_refusal
from .cooperative import cooperative_backward, run_setup
from .cooperative import backward_setup as cooperative_backward_setup
from .resident_backward import launch_setup as resident_backward_setup  # (a Gluon kernel: GPU only)
from .resident_backward import refusal as resident_refusal
from .unaligned import backward_setup as unaligned_backward_setup
from .unaligned import takes, unaligned_backward


@triton.jit
def softmax_backward_kernel(dx_ptr, y_ptr, dy_ptr, y_row_stride, dy_row_stride, dx_row_stride, n_rows, n_cols,
                            ROWS: tl.constexpr, BLOCK: tl.constexpr, VEC: tl.constexpr = 1):
    # The four ints count VEC-element pieces, so whole 16-byte rows move 16 bytes at a time (fused.py says why).
    y_row_stride, dy_row_stride, dx_row_stride = y_row_stride * VEC, dy_row_stride * VEC, dx_row_stride * VEC
    n_cols = n_cols * VEC
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK)
    mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
    y = tl.load(y_ptr + rows[:, None] * y_row_stride + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    dy = tl.load(dy_ptr + rows[:, None] * dy_row_stride + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    dot = tl.sum(dy * y, axis=1)  # Σ dy·y per row (padding is 0, adds nothing)
    dx = y * (dy - dot[:, None])
    tl.store(dx_ptr + rows[:, None] * dx_row_stride + cols[None, :], dx.to(dx_ptr.dtype.element_ty), mask=mask)


@triton.jit
def chunk_dot_kernel(dot_ptr, y_ptr, dy_ptr, y_row_stride, dy_row_stride, n_cols, chunk_size, n_chunks,
                     BLOCK: tl.constexpr):
    # Long rows, launch 1: program (row, chunk) writes its chunk's share of Σ dy·y.
    pid = tl.program_id(0).to(tl.int64)
    row, chunk = pid // n_chunks, pid % n_chunks
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], tl.float32)
    for start in range(chunk * chunk_size, tl.minimum((chunk + 1) * chunk_size, n_cols), BLOCK):
        mask = start + offs < n_cols
        y = tl.load(y_ptr + row * y_row_stride + start + offs, mask=mask, other=0.0, eviction_policy="evict_last")
        dy = tl.load(dy_ptr + row * dy_row_stride + start + offs, mask=mask, other=0.0, eviction_policy="evict_last")
        acc += dy.to(tl.float32) * y.to(tl.float32)
    tl.store(dot_ptr + pid, tl.sum(acc, axis=0))


@triton.jit
def chunk_apply_kernel(dx_ptr, y_ptr, dy_ptr, dot_ptr, y_row_stride, dy_row_stride, dx_row_stride, n_cols,
                       chunk_size, n_chunks, BLOCK: tl.constexpr, CHUNKS: tl.constexpr):
    # Long rows, launch 2 (programs numbered backwards, to find launch 1's last reads in L2):
    # add up the row's shares, then dx = y · (dy - Σ dy·y) over this chunk.
    pid = tl.num_programs(0) - 1 - tl.program_id(0).to(tl.int64)
    row, chunk = pid // n_chunks, pid % n_chunks
    c = tl.arange(0, CHUNKS)
    dot = tl.sum(tl.load(dot_ptr + row * n_chunks + c, mask=c < n_chunks, other=0.0), axis=0)
    offs = tl.arange(0, BLOCK)
    for start in range(chunk * chunk_size, tl.minimum((chunk + 1) * chunk_size, n_cols), BLOCK):
        mask = start + offs < n_cols
        y = tl.load(y_ptr + row * y_row_stride + start + offs, mask=mask, other=0.0,
                    eviction_policy="evict_first").to(tl.float32)
        dy = tl.load(dy_ptr + row * dy_row_stride + start + offs, mask=mask, other=0.0,
                     eviction_policy="evict_first").to(tl.float32)
        tl.store(dx_ptr + row * dx_row_stride + start + offs, (y * (dy - dot)).to(dx_ptr.dtype.element_ty),
                 mask=mask, eviction_policy="evict_first")


def _gluon_tuned(y) -> bool:
    """Whether the Gluon backwards may take y: a non-empty float16/bfloat16/float32 tensor on a GPU like the one
    they were tuned on (``tuning.GLUON_CAPABILITY``)."""
    return (y.device.type == "cuda" and y.numel() > 0 and y.dtype in (torch.float16, torch.bfloat16, torch.float32)
            and device_limits(y.device)[0] == GLUON_CAPABILITY)


def resident_knobs(y, dy, dx) -> dict | None:
    """The knobs with which the dispatcher sends this backward to ``resident_backward.py``, or None where it does
    not: a GPU like the one it was tuned on, a row length ``tuning.RESIDENT_BACKWARD`` gives warps (for fp32, rows
    that ``unaligned.py`` takes), windows that fit its shared memory; windows from ``RESIDENT_BACKWARD_LINE`` bytes
    before each row where y and dy lie alike around such lines, else from its vector."""
    if not _gluon_tuned(y):
        return None
    warps = pick(RESIDENT_BACKWARD[element_size(y.dtype)], y.shape[1])
    if warps is None or not (RESIDENT_BACKWARD_WHOLE_VECTORS[element_size(y.dtype)] or takes(y, dy, dx)):
        return None
    for line in dict.fromkeys((RESIDENT_BACKWARD_LINE, 16)):
        if not resident_refusal(y, dy, dx, warps, line):
            return dict(num_warps=warps, line=line)
    return None


def clustered_knobs(y, dy, dx) -> dict | None:
    """The knobs with which the dispatcher sends this backward to ``clustered_backward.py``, or None: a GPU like
    the one it was tuned on, a row length ``tuning.CLUSTERED_BACKWARD`` gives knobs, tensors it takes."""
    if not _gluon_tuned(y):
        return None
    knobs = pick(CLUSTERED_BACKWARD[element_size(y.dtype)], y.shape[1])
    if knobs is None or knobs.get("parts", 1) > PORTABLE_PARTS or clustered_refusal(y, dy, dx, **knobs):
        return None
    return dict(knobs, dsmem=True)


def tma_knobs(y, dy, dx) -> dict | None:
    """The knobs with which the dispatcher sends this backward to ``clustered_tma_backward.py``, or None: a GPU like
    the one it was tuned on, a row length ``tuning.TMA_BACKWARD`` gives knobs, tensors it takes (rows on 16 bytes
    and whole 16-byte vectors, y, dy and dx of one dtype; rows that are not whole vectors, through its flat form,
    with the knobs of ``tuning.TMA_BACKWARD_FLAT``)."""
    if not _gluon_tuned(y):
        return None
    knobs = pick((TMA_BACKWARD_FLAT if is_flat(y) else TMA_BACKWARD)[element_size(y.dtype)], y.shape[1])
    if knobs is None or tma_refusal(y, dy, dx, **knobs):
        return None
    return knobs


def launch_setup(dx, y, dy):
    """``(kernel, grid, args, options, sizes, one)`` of the launch ``softmax_backward`` makes with no knobs, for
    checked 2-D ``y``, ``dy``, ``dx`` with contiguous rows (the dispatcher's plans reuse it): ``args[0:3]`` are
    dx, y, dy or the windows before them (``unaligned.py``); ``sizes`` None for a tile kernel (no scratch),
    else as in ``cooperative.launch_setup``."""
    knobs = tma_knobs(y, dy, dx)
    if knobs:  # rows of whole vectors on a cluster of programs, y and dy copied by TMA into their shared memory
        return (*tma_backward_setup(dx, y, dy, **knobs), None, True)
    knobs = resident_knobs(y, dy, dx)
    if knobs:  # y and dy wait in shared memory (GPU, rows of 16,385 and more)
        return (*resident_backward_setup(dx, y, dy, **knobs), None, True)
    knobs = clustered_knobs(y, dy, dx)
    if knobs:  # longer rows on a cluster of programs, y and dy in their shared memory
        return (*clustered_backward_setup(dx, y, dy, **knobs), None, True)
    if takes(y, dy, dx):  # rows off 16 bytes: unaligned.py, where y, dy and dx lie alike
        got = unaligned_backward_setup(dx, y, dy)
        if got is not None:
            return got
    n_rows, n_cols = y.shape
    if n_cols > BACKWARD_TILE_COLS:
        return cooperative_backward_setup(dx, y, dy)
    BLOCK = next_power_of_2(n_cols)
    ROWS = max(1, BACKWARD_TILE // BLOCK)
    vec = row_vector(n_cols, y, dy, dx)
    args = (dx, y, dy, *[t.stride(0) // vec for t in (y, dy, dx)], n_rows, n_cols // vec)
    options = dict(ROWS=ROWS, BLOCK=BLOCK, VEC=vec, num_warps=default_num_warps(ROWS * BLOCK))
    return softmax_backward_kernel, (cdiv(n_rows, ROWS),), args, options, None, True


def softmax_backward(y: torch.Tensor, dy: torch.Tensor, out: torch.Tensor | None = None, ROWS: int | None = None,
                     BLOCK: int | None = None, num_warps: int | None = None, chunks: int | None = None):
    """dx for softmax over the last dim of 2-D ``y`` (the forward output) and ``dy`` (its gradient).

    ``out``: where dx goes (a tensor like y); it may be ``dy`` or ``y`` itself (same memory, same strides), or share
    a buffer with them without sharing an element (``out=B[:, n:]`` beside ``dy=B[:, :n]``); any other
    overlap is refused. y and dy may differ in dtype (each is read as it is, the sums are float32); dx has y's.
    (``softmax_lab.op.softmax_backward``, the operator, asks for one dtype, as torch does.)
    Rows up to ``tuning.BACKWARD_TILE_COLS`` (and ``BLOCK`` >= row length): one launch, ``ROWS`` rows per program.
    Longer rows: cooperating programs of ``BLOCK`` elements each (``cooperative_backward``); with ``chunks``,
    the two-launch path over ``chunks`` pieces per row instead."""
    check_knobs(ROWS=ROWS, BLOCK=BLOCK, num_warps=num_warps, chunks=chunks)
    y, dy, dx = backward_inputs(y, dy, out)
    n_rows, n_cols = y.shape
    if y.numel() == 0:
        return dx
    if ROWS is None and BLOCK is None and num_warps is None and chunks is None:  # what the dispatcher plans too
        run_setup(launch_setup(dx, y, dy), y.device, counts_at=4)
        return dx
    if ROWS is None and BLOCK is None and chunks is None and takes(y, dy, dx):  # rows off 16 bytes: unaligned.py
        if unaligned_backward(y, dy, dx, num_warps=num_warps) is not None:
            return dx
    strides = (y.stride(0), dy.stride(0))
    if n_cols <= BACKWARD_TILE_COLS and (BLOCK is None or BLOCK >= n_cols):
        BLOCK = BLOCK or next_power_of_2(n_cols)
        ROWS = ROWS or max(1, BACKWARD_TILE // BLOCK)
        vec = row_vector(n_cols, y, dy, dx)
        softmax_backward_kernel[(cdiv(n_rows, ROWS),)](
            dx, y, dy, *[s // vec for s in (*strides, dx.stride(0))], n_rows, n_cols // vec, ROWS=ROWS, BLOCK=BLOCK,
            VEC=vec, num_warps=num_warps or default_num_warps(ROWS * BLOCK))
        return dx
    if chunks is None:
        return cooperative_backward(y, dy, dx, BLOCK=BLOCK, num_warps=num_warps)
    BLOCK = BLOCK or CHUNKED_BACKWARD_BLOCK
    chunks, chunk_size = split_in_chunks(n_cols, chunks, BLOCK)
    num_warps = num_warps or default_num_warps(BLOCK)
    dot = torch.empty(n_rows * chunks, dtype=torch.float32, device=y.device)
    grid = (n_rows * chunks,)
    chunk_dot_kernel[grid](dot, y, dy, *strides, n_cols, chunk_size, chunks, BLOCK=BLOCK, num_warps=num_warps)
    chunk_apply_kernel[grid](dx, y, dy, dot, *strides, dx.stride(0), n_cols, chunk_size, chunks, BLOCK=BLOCK,
                             CHUNKS=next_power_of_2(chunks), num_warps=num_warps)
    return dx
