"""Row-serial softmax: one program per row that walks its row ONE ELEMENT AT A TIME.

This is the "one thread per row" baseline of the fp16 optimisation write-up: three walks (max, sum of
exponentials, normalise), each a scalar loop. Only one lane of the program does useful work and the
loads cannot be combined, so it is slow; it is here to be beaten.
"""
import torch
import triton
import triton.language as tl

from ._launch import prepare


@triton.jit
def row_serial_softmax_kernel(out_ptr, in_ptr, in_row_stride, out_row_stride, n_cols):
    row = tl.program_id(0).to(tl.int64)  # int64: row * stride can pass 2**31
    in_row = in_ptr + row * in_row_stride
    out_row = out_ptr + row * out_row_stride

    # Walk 1: the max, starting from the first element.
    row_max = tl.load(in_row).to(tl.float32)
    for i in range(1, n_cols):
        row_max = tl.maximum(row_max, tl.load(in_row + i).to(tl.float32))

    # Walk 2: the sum of exp(x - max).
    total = tl.exp(tl.load(in_row).to(tl.float32) - row_max)
    for i in range(1, n_cols):
        total += tl.exp(tl.load(in_row + i).to(tl.float32) - row_max)

    # Walk 3: normalise and store each element.
    for i in range(0, n_cols):
        y = tl.exp(tl.load(in_row + i).to(tl.float32) - row_max) / total
        tl.store(out_row + i, y.to(out_ptr.dtype.element_ty))


def row_serial_softmax(x: torch.Tensor, out: torch.Tensor | None = None, num_warps: int = 1) -> torch.Tensor:
    """Softmax over the last dim of 2-D ``x``, one program per row, one element at a time."""
    x, y = prepare(x, out, num_warps=num_warps)
    n_rows, n_cols = x.shape
    if x.numel() == 0:
        return y
    row_serial_softmax_kernel[(n_rows,)](y, x, x.stride(0), y.stride(0), n_cols, num_warps=num_warps)
    return y
