"""Softmax in float64: forward (with an optional SDPA-style mask) and backward kernels that compute in double.

The course's kernels read 16- and 32-bit floats and compute in float32; a float64 input deserves float64
arithmetic, as ``torch.softmax`` gives it. (The operator also sends here what no float32 kernel takes: masked rows
longer than ``masked.MAX_COLS``; any input dtype works, the output has the input's dtype.) These kernels take
rows of any length, BLOCK elements at a time: each lane keeps its own running ``(m, l)`` (max and sum of exp)
over the blocks, the lanes are combined once at the end, and a second pass writes ``exp(x - m) / l``. Two reads
of x: float64 is about accuracy here, not speed.

NaN and ±inf follow ``torch.softmax``: a row with NaN or +inf gives NaN, a row of -inf gives NaN; with a mask
(bool: True takes part; float: added) a row with nothing left gives zeros, like ``aten._safe_softmax``.
"""
import torch
import triton
import triton.language as tl

from ._launch import next_power_of_2

NO_MASK, BOOL_MASK, ADD_MASK = 0, 1, 2
MAX_BLOCK = 1024  # elements per step along a row


@triton.jit
def _scores(x_ptr, mask_ptr, row, cols, in_row, x_row_stride, m_row_stride, m_col_stride, MASK_KIND: tl.constexpr):
    # One block of a row as float64, with the mask applied (padding lanes read -inf).
    s = tl.load(x_ptr + row * x_row_stride + cols, mask=in_row, other=float("-inf")).to(tl.float64)
    if MASK_KIND == 1:
        keep = tl.load(mask_ptr + row * m_row_stride + cols * m_col_stride, mask=in_row, other=0) != 0
        s = tl.where(keep, s, float("-inf"))
    elif MASK_KIND == 2:
        s = s + tl.load(mask_ptr + row * m_row_stride + cols * m_col_stride, mask=in_row, other=0.0).to(tl.float64)
    return s


@triton.jit
def double_softmax_kernel(out_ptr, x_ptr, mask_ptr, x_row_stride, out_row_stride, m_row_stride, m_col_stride, n_cols,
                          MASK_KIND: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    m = tl.full([BLOCK], float("-inf"), tl.float64)  # each lane's running max ...
    l = tl.zeros([BLOCK], tl.float64)  # ... and sum of exp(s - m)
    for start in range(0, n_cols, BLOCK):
        cols = start + offs
        s = _scores(x_ptr, mask_ptr, row, cols, cols < n_cols, x_row_stride, m_row_stride, m_col_stride, MASK_KIND)
        m_new = tl.maximum(m, s)
        shift = tl.where(m_new == float("-inf"), 0.0, m_new)  # all -inf so far: shift by 0, every exp is 0
        l = l * tl.exp(m - shift) + tl.exp(s - shift)
        m = m_new
    row_max = tl.max(m, axis=0)
    shift = tl.where(row_max == float("-inf"), 0.0, row_max)
    total = tl.sum(l * tl.exp(m - shift), axis=0)
    if MASK_KIND != 0:
        total = tl.where(total == 0.0, 1.0, total)  # nothing left in the row: zeros, not 0/0
    for start in range(0, n_cols, BLOCK):
        cols = start + offs
        s = _scores(x_ptr, mask_ptr, row, cols, cols < n_cols, x_row_stride, m_row_stride, m_col_stride, MASK_KIND)
        y = tl.exp(s - shift) / total
        tl.store(out_ptr + row * out_row_stride + cols, y.to(out_ptr.dtype.element_ty), mask=cols < n_cols)


@triton.jit
def double_backward_kernel(dx_ptr, y_ptr, dy_ptr, y_row_stride, dy_row_stride, dx_row_stride, n_cols,
                           BLOCK: tl.constexpr):
    # dx = y · (dy - Σ dy·y): one pass for the sum, one for dx.
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], tl.float64)
    for start in range(0, n_cols, BLOCK):
        cols = start + offs
        y = tl.load(y_ptr + row * y_row_stride + cols, mask=cols < n_cols, other=0.0).to(tl.float64)
        dy = tl.load(dy_ptr + row * dy_row_stride + cols, mask=cols < n_cols, other=0.0).to(tl.float64)
        acc += y * dy
    dot = tl.sum(acc, axis=0)
    for start in range(0, n_cols, BLOCK):
        cols = start + offs
        y = tl.load(y_ptr + row * y_row_stride + cols, mask=cols < n_cols, other=0.0).to(tl.float64)
        dy = tl.load(dy_ptr + row * dy_row_stride + cols, mask=cols < n_cols, other=0.0).to(tl.float64)
        dx = y * (dy - dot)
        tl.store(dx_ptr + row * dx_row_stride + cols, dx.to(dx_ptr.dtype.element_ty), mask=cols < n_cols)


def _rows(t: torch.Tensor) -> torch.Tensor:
    return t if t.shape[1] <= 1 or t.stride(1) == 1 else t.contiguous()


def softmax(x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Softmax over the last dim of a 2-D float ``x`` (on the kernels' device, no grad) computed in float64, under
    an optional ``mask`` of x's shape (bool or float, any strides). Returns a new contiguous tensor of x's dtype."""
    if not x.dtype.is_floating_point:
        raise TypeError(f"double.softmax takes a floating-point x, got {x.dtype}")
    x = _rows(x)
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    n_rows, n_cols = x.shape
    if x.numel() == 0:
        return out
    kind, m, m_strides = NO_MASK, x, (0, 0)
    if mask is not None:
        kind = BOOL_MASK if mask.dtype == torch.bool else ADD_MASK
        m = mask.view(torch.uint8) if kind == BOOL_MASK else mask
        m_strides = m.stride()
    BLOCK = min(next_power_of_2(n_cols), MAX_BLOCK)
    double_softmax_kernel[(n_rows,)](out, x, m, x.stride(0), out.stride(0), *m_strides, n_cols,
                                     MASK_KIND=kind, BLOCK=BLOCK, num_warps=4)
    return out


def softmax_backward(y: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    """dx = y·(dy - Σ dy·y) over the last dim of 2-D float ``y`` and ``dy`` (same shape), computed in float64;
    dx has y's dtype."""
    if not (y.dtype.is_floating_point and dy.dtype.is_floating_point):
        raise TypeError(f"double.softmax_backward takes floating-point tensors, got {y.dtype} and {dy.dtype}")
    y, dy = _rows(y), _rows(dy)
    dx = torch.empty(y.shape, dtype=y.dtype, device=y.device)
    n_rows, n_cols = y.shape
    if y.numel() == 0:
        return dx
    BLOCK = min(next_power_of_2(n_cols), MAX_BLOCK)
    double_backward_kernel[(n_rows,)](dx, y, dy, y.stride(0), dy.stride(0), dx.stride(0), n_cols, BLOCK=BLOCK,
                                      num_warps=4)
    return dx
