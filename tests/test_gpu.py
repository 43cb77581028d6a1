"""GPU-only tests: sizes the interpreter cannot run. On the GPU machine: make test-gpu
(python3 -m pytest tests -m "gpu or not gpu"). Skipped without CUDA."""
import pytest
import torch

import softmax_lab
from softmax_lab import kernels, softmax
from softmax_lab.kernels import ALL, masked_softmax, softmax_backward
from softmax_lab.reference import masked_softmax_ref, softmax_backward_ref
from softmax_lab.testing import assert_softmax_correct, check_softmax, tolerance

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not softmax_lab.ON_GPU, reason="needs a CUDA GPU")]
DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def _randn(shape, dtype=torch.float32, scale=3.0):
    return (torch.randn(shape, device="cuda") * scale).to(dtype)


def _check_rows(y, x, rows):
    """Compare selected rows with a float64 softmax (cheap for huge tensors)."""
    atol, rtol = tolerance(x.dtype)
    ref = torch.softmax(x[rows].double(), -1)
    torch.testing.assert_close(y[rows].double(), ref, atol=atol, rtol=rtol)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", list(ALL))
def test_every_kernel_standard_cases(name, dtype):
    assert_softmax_correct(ALL[name], dtype)


@pytest.mark.parametrize("name,shape", [
    ("naive", (64, 1000)), ("naive", (4, 4096)), ("row_serial", (512, 1000)), ("three_pass", (4096, 1024)),
    ("three_pass", (8, 100_000)), ("fused", (300, 65536)), ("multirow", (3000, 2048)), ("multirow", (5000, 77)),
    ("online", (200, 100_000)), ("online", (3, 1 << 20)), ("split_row", (16, 1 << 20)),
    ("split_row", (5, 300_001))])
def test_kernels_at_gpu_sizes(name, shape):
    for dtype in (torch.float32, torch.bfloat16):
        x = _randn(shape, dtype)
        assert check_softmax(ALL[name], x) == ""


# The benchmark's shapes, through the dispatcher.
BENCH_SHAPES = [((4096, 1024), torch.float32), ((65536, 512), torch.float16), ((65536, 512), torch.bfloat16),
                ((32768, 1000), torch.float32), ((65536, 128), torch.float32), ((32768, 2048), torch.float16),
                ((16384, 4096), torch.float32), ((4096, 16384), torch.float32), ((1024, 65536), torch.float32),
                ((256, 262144), torch.float32), ((16, 1048576), torch.float32)]


@pytest.mark.parametrize("shape,dtype", BENCH_SHAPES, ids=lambda v: str(v))
def test_dispatcher_on_bench_shapes(shape, dtype):
    x = _randn(shape, dtype)
    y = softmax(x)
    _check_rows(y, x, slice(None))


@pytest.mark.parametrize("n_cols", [65537, 100_000, 1 << 20, (1 << 20) + 3])
def test_rows_past_65536(n_cols):
    for n_rows in (1, 7, 300):
        x = _randn((n_rows, n_cols))
        x[0, : n_cols // 2] = float("-inf")  # a long -inf run: whole tiles and chunks of -inf
        _check_rows(softmax(x), x, slice(None))


def test_more_than_2_31_elements():
    # 2**21 + 5 rows of 1024 fp16: 2.15e9 elements, so row * stride passes 2**31 (needs int64 offsets).
    n_rows = (1 << 21) + 5
    x = torch.empty((n_rows, 1024), dtype=torch.float16, device="cuda")
    x.normal_(0, 3)
    rows = torch.tensor([0, 1, n_rows // 2, n_rows - 2, n_rows - 1], device="cuda")
    for name in ("fused", "multirow", "online", "split_row"):
        y = ALL[name](x)
        _check_rows(y, x, rows)
        del y
    y = softmax(x)
    _check_rows(y, x, rows)
    dy = torch.randn_like(y)
    dx = softmax_backward(y, dy)
    torch.testing.assert_close(dx[rows].double(), softmax_backward_ref(y[rows], dy[rows]), atol=1e-2, rtol=1e-2)


@pytest.mark.parametrize("shape", [(65536, 512), (4096, 4096), (64, 100_000)])
def test_backward_gpu(shape):
    for dtype in DTYPES:
        y = torch.softmax(_randn(shape), -1).to(dtype)
        dy = _randn(shape, dtype)
        atol, rtol = tolerance(dtype)
        torch.testing.assert_close(softmax_backward(y, dy).double(), softmax_backward_ref(y, dy), atol=atol * 10,
                                   rtol=rtol)


def test_autograd_gpu():
    x = _randn((8, 16, 384)).requires_grad_()
    w = _randn((8, 16, 384))
    (softmax(x, dim=1) * w).sum().backward()
    x64 = x.detach().double().requires_grad_()
    (torch.softmax(x64, dim=1) * w.double()).sum().backward()
    torch.testing.assert_close(x.grad.double(), x64.grad, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_masked_attention_gpu(dtype):
    B, H, S = 4, 8, 512
    scores = _randn((B, H, S, S), dtype)
    causal = torch.ones(S, S, dtype=torch.bool, device="cuda").tril()
    lengths = torch.tensor([512, 300, 1, 77], device="cuda")
    padding = (torch.arange(S, device="cuda")[None, :] < lengths[:, None])[:, None, None, :]
    padding[3, :, :, :] = False  # a sequence with nothing to attend to: all zeros
    atol, rtol = tolerance(dtype)
    for mask in (causal, causal & padding, torch.zeros(S, S, device="cuda").masked_fill(~causal, float("-inf"))):
        y = masked_softmax(scores, mask)
        torch.testing.assert_close(y.double(), masked_softmax_ref(scores, mask), atol=atol, rtol=rtol)
    assert (masked_softmax(scores, padding)[3] == 0).all()


def test_kernel_limits_raise():
    for name, limit in kernels.MAX_COLS.items():
        if limit:
            with pytest.raises(ValueError):
                ALL[name](torch.empty((1, limit + 1), device="cuda"))
