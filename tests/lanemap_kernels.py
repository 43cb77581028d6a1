"""A kernel with switchable mistakes for tests/test_lanemap.py."""
import softmax_lab  # noqa: F401 - before triton: picks the device (the interpreter on a CPU)
import triton
import triton.language as tl


@triton.jit
def _kernel(out_ptr, in_ptr, in_stride, out_stride, n_cols, BLOCK: tl.constexpr, USE_STRIDE: tl.constexpr,
            MASK_STORE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    step = in_stride if USE_STRIDE else n_cols
    x = tl.load(in_ptr + row * step + offs, mask=offs < n_cols, other=float("-inf"))
    p = tl.exp(x - tl.max(x, 0))
    y = p / tl.sum(p, 0)
    if MASK_STORE:
        tl.store(out_ptr + row * out_stride + offs, y, mask=offs < n_cols)
    else:
        tl.store(out_ptr + row * out_stride + offs, y)
