"""Softmax backward and an autograd Function, so the kernels can sit inside a model.

With y = softmax(x) and the incoming gradient dy, the gradient is, per row,

    dx = y · (dy - Σ dy·y)

(the Jacobian of softmax is diag(y) - y yᵀ). One kernel, two variants of the same maths:
``softmax_backward_kernel`` holds ROWS whole rows in one [ROWS, BLOCK] tile (rows up to ``MAX_TILE_COLS``);
``softmax_backward_long_kernel`` walks longer rows in tiles, twice (once for Σ dy·y, once to write dx).
"""
import torch
import triton
import triton.language as tl

from ._launch import check_input, default_num_warps, output_for, rows_view

MAX_TILE_COLS = 16384


@triton.jit
def softmax_backward_kernel(dx_ptr, y_ptr, dy_ptr, y_row_stride, dy_row_stride, dx_row_stride, n_rows, n_cols,
                            ROWS: tl.constexpr, BLOCK: tl.constexpr):
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK)
    mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
    y = tl.load(y_ptr + rows[:, None] * y_row_stride + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    dy = tl.load(dy_ptr + rows[:, None] * dy_row_stride + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    dot = tl.sum(dy * y, axis=1)  # Σ dy·y per row (padding is 0, adds nothing)
    dx = y * (dy - dot[:, None])
    tl.store(dx_ptr + rows[:, None] * dx_row_stride + cols[None, :], dx.to(dx_ptr.dtype.element_ty), mask=mask)


@triton.jit
def softmax_backward_long_kernel(dx_ptr, y_ptr, dy_ptr, y_row_stride, dy_row_stride, dx_row_stride, n_cols,
                                 BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    # Walk 1: Σ dy·y over the row.
    acc = tl.zeros([BLOCK], tl.float32)
    for start in range(0, n_cols, BLOCK):
        mask = start + offs < n_cols
        y = tl.load(y_ptr + row * y_row_stride + start + offs, mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(dy_ptr + row * dy_row_stride + start + offs, mask=mask, other=0.0).to(tl.float32)
        acc += dy * y
    dot = tl.sum(acc, axis=0)
    # Walk 2: dx = y · (dy - Σ dy·y).
    for start in range(0, n_cols, BLOCK):
        mask = start + offs < n_cols
        y = tl.load(y_ptr + row * y_row_stride + start + offs, mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(dy_ptr + row * dy_row_stride + start + offs, mask=mask, other=0.0).to(tl.float32)
        tl.store(dx_ptr + row * dx_row_stride + start + offs, (y * (dy - dot)).to(dx_ptr.dtype.element_ty), mask=mask)


def softmax_backward(y: torch.Tensor, dy: torch.Tensor, out: torch.Tensor | None = None, ROWS: int | None = None,
                     BLOCK: int | None = None, num_warps: int | None = None) -> torch.Tensor:
    """dx for softmax over the last dim of 2-D ``y`` (the forward output) and ``dy`` (its gradient)."""
    check_input(y, "y")
    check_input(dy, "dy")
    if dy.shape != y.shape:
        raise ValueError(f"dy has shape {tuple(dy.shape)} but y has shape {tuple(y.shape)}")
    y, dy = rows_view(y), rows_view(dy)
    dx = output_for(y, out, "out (dx)")
    n_rows, n_cols = y.shape
    if y.numel() == 0:
        return dx
    args = (dx, y, dy, y.stride(0), dy.stride(0), dx.stride(0))
    if n_cols <= MAX_TILE_COLS and (BLOCK is None or BLOCK >= n_cols):
        BLOCK = BLOCK or triton.next_power_of_2(n_cols)
        ROWS = ROWS or max(1, 4096 // BLOCK)
        softmax_backward_kernel[(triton.cdiv(n_rows, ROWS),)](*args, n_rows, n_cols, ROWS=ROWS, BLOCK=BLOCK,
                                                              num_warps=num_warps or default_num_warps(ROWS * BLOCK))
    else:
        BLOCK = BLOCK or 4096
        softmax_backward_long_kernel[(n_rows,)](*args, n_cols, BLOCK=BLOCK,
                                                num_warps=num_warps or default_num_warps(BLOCK))
    return dx


class SoftmaxFunction(torch.autograd.Function):
    """``SoftmaxFunction.apply(x, forward)``: y = forward(x) (any softmax over the last dim that keeps x's
    shape, e.g. ``fused_softmax``); the backward pass runs ``softmax_backward`` on the kernel side.

    Example: ``y = SoftmaxFunction.apply(x, fused_softmax); y.sum().backward()``.
    """

    @staticmethod
    def forward(ctx, x, forward):
        y = forward(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, dy):
        (y,) = ctx.saved_tensors
        n = y.shape[-1]
        y2 = y.reshape(-1, n)
        dy2 = dy.reshape(-1, n)
        dx = softmax_backward(y2, dy2)
        return dx.view(y.shape), None
