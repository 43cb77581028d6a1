"""Three-pass softmax: three kernel launches, with the exponentials kept in a real global buffer.

1. ``row_max_kernel``   reads x, writes one max per row.
2. ``exp_sum_kernel``   reads x again, writes exp(x - max) to a float32 buffer the size of x, and the row sums.
3. ``normalize_kernel`` reads the buffer, writes buffer / sum.

That is what a framework does when each step is its own operator: x is read twice, and a float32 buffer as
big as x is written once and read once (for 4096×1024 that buffer is 16 MiB). The fused kernel does the same
maths in one launch, reading x once and writing y once.
"""
import torch
import triton
import triton.language as tl

from ._launch import prepare, next_power_of_2


@triton.jit
def row_max_kernel(max_ptr, in_ptr, in_row_stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    m = tl.full([BLOCK], float("-inf"), tl.float32)
    for start in range(0, n_cols, BLOCK):
        x = tl.load(in_ptr + row * in_row_stride + start + offs, mask=start + offs < n_cols,
                    other=float("-inf")).to(tl.float32)
        m = tl.maximum(m, x)
    tl.store(max_ptr + row, tl.max(m, axis=0))


@triton.jit
def exp_sum_kernel(buf_ptr, sum_ptr, in_ptr, max_ptr, in_row_stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    row_max = tl.load(max_ptr + row)
    s = tl.zeros([BLOCK], tl.float32)
    for start in range(0, n_cols, BLOCK):
        mask = start + offs < n_cols
        x = tl.load(in_ptr + row * in_row_stride + start + offs, mask=mask, other=float("-inf")).to(tl.float32)
        e = tl.exp(x - row_max)
        tl.store(buf_ptr + row * n_cols + start + offs, e, mask=mask)  # the intermediate goes to global memory
        s += tl.where(mask, e, 0.0)
    tl.store(sum_ptr + row, tl.sum(s, axis=0))


@triton.jit
def normalize_kernel(out_ptr, buf_ptr, sum_ptr, out_row_stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    total = tl.load(sum_ptr + row)
    for start in range(0, n_cols, BLOCK):
        mask = start + offs < n_cols
        e = tl.load(buf_ptr + row * n_cols + start + offs, mask=mask, other=0.0)
        tl.store(out_ptr + row * out_row_stride + start + offs, (e / total).to(out_ptr.dtype.element_ty), mask=mask)


def exp_buffer_bytes(x: torch.Tensor) -> int:
    """Bytes of the float32 exponentials buffer three-pass needs for ``x`` (4096×1024 -> 16 MiB)."""
    return x.numel() * 4


def three_pass_softmax(x: torch.Tensor, out: torch.Tensor | None = None, BLOCK: int | None = None,
                       num_warps: int | None = None, return_buffer: bool = False):
    """Softmax over the last dim of 2-D ``x`` in three launches. With ``return_buffer=True`` returns
    ``(y, buffer)`` so you can look at the float32 exponentials buffer (``buffer.nbytes``)."""
    x, y = prepare(x, out, BLOCK=BLOCK, num_warps=num_warps)
    n_rows, n_cols = x.shape
    buf = torch.empty((n_rows, n_cols), dtype=torch.float32, device=x.device)
    if x.numel() > 0:
        row_max = torch.empty(n_rows, dtype=torch.float32, device=x.device)
        row_sum = torch.empty(n_rows, dtype=torch.float32, device=x.device)
        BLOCK = BLOCK or min(next_power_of_2(n_cols), 4096)
        num_warps = num_warps or (4 if BLOCK <= 1024 else 8)
        grid = (n_rows,)
        row_max_kernel[grid](row_max, x, x.stride(0), n_cols, BLOCK=BLOCK, num_warps=num_warps)
        exp_sum_kernel[grid](buf, row_sum, x, row_max, x.stride(0), n_cols, BLOCK=BLOCK, num_warps=num_warps)
        normalize_kernel[grid](y, buf, row_sum, y.stride(0), n_cols, BLOCK=BLOCK, num_warps=num_warps)
    return (y, buf) if return_buffer else y
