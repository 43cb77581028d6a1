"""softmax_lab.softmax: shapes, dims, dtypes, strides, masks, errors, autograd; torch.softmax's signature."""
import importlib
import inspect
import warnings

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import softmax_lab
from softmax_lab import softmax
from softmax_lab.reference import masked_softmax_ref, softmax_backward_ref, softmax_ref
from softmax_lab.testing import assert_softmax_correct, randn, tolerance

DEV = softmax_lab.DEVICE
DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def _close(y, ref, dtype):
    atol, rtol = tolerance(dtype)
    torch.testing.assert_close(y.double(), ref, atol=atol, rtol=rtol, equal_nan=True)


def test_is_the_function():
    assert callable(softmax) and softmax_lab.softmax is softmax
    assert softmax.choose(4, 128, torch.float32)[0] == "multirow"
    assert softmax_lab.dispatch.choose is softmax.choose


def test_the_backward_is_at_the_top_too():
    # softmax_lab.softmax_backward, beside softmax_lab.softmax (a PyTorch user looked for it there)
    from softmax_lab.op import softmax_backward

    assert softmax_lab.softmax_backward is softmax_backward
    y = softmax_lab.softmax(randn((3, 7), device=DEV))
    dy = randn((3, 7), device=DEV)
    ref = y * (dy - (dy * y).sum(-1, keepdim=True))
    torch.testing.assert_close(softmax_lab.softmax_backward(y, dy), ref)


def test_no_module_hides_the_function():
    # `import softmax_lab.softmax` used to rebind softmax_lab.softmax to the dispatcher module.
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("softmax_lab.softmax")
    assert callable(softmax_lab.softmax) and softmax_lab.softmax is softmax
    x = randn((2, 5), device=DEV)
    _close(softmax_lab.softmax(x, -1), softmax_ref(x), x.dtype)


def test_signature_is_torchs():
    params = inspect.signature(softmax).parameters
    assert list(params) == ["input", "dim", "dtype", "mask"]
    assert params["mask"].kind is inspect.Parameter.KEYWORD_ONLY and params["dtype"].default is None
    x = randn((3, 6), device=DEV)
    with pytest.raises(TypeError):
        softmax(x, -1, None, torch.ones(6, dtype=torch.bool, device=DEV))  # mask is keyword-only
    _close(softmax(input=x, dim=0), softmax_ref(x, dim=0), x.dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_dtype_casts_first(dtype):
    x = randn((4, 70), torch.float16, DEV, scale=5.0)
    y = softmax(x, -1, dtype)
    assert y.dtype == dtype
    # cast first, then softmax (accumulating in float32): what torch.softmax(x, -1, dtype=dtype) means
    _close(y, softmax_ref(x.to(dtype)), dtype)
    y = softmax(x, 0, dtype=dtype, mask=torch.ones(70, dtype=torch.bool, device=DEV))
    assert y.dtype == dtype
    _close(y, softmax_ref(x.to(dtype), dim=0), dtype)
    y = softmax(x, -1, torch.float64)  # as torch: cast to float64 first, computed in float64
    assert y.dtype == torch.float64
    torch.testing.assert_close(y, torch.softmax(x, -1, dtype=torch.float64), atol=1e-12, rtol=1e-10)
    with pytest.raises(TypeError, match="floating"):
        softmax(x, -1, torch.int32)
    with pytest.raises(TypeError, match="dtype"):
        softmax(x, -1, "float32")


def test_outputs_are_contiguous():
    big = randn((6, 50), device=DEV)
    for x, dim in [(randn((5, 7), device=DEV), 0), (big.t(), 0), (big.t(), 1), (big[:, ::2], -1),
                   (randn((2, 3, 4), device=DEV), 1)]:
        y = softmax(x, dim)
        assert y.is_contiguous()
        _close(y.view(-1), softmax_ref(x, dim=dim).contiguous().view(-1), x.dtype)
    y = softmax(big.t(), 0, mask=torch.ones(50, 1, dtype=torch.bool, device=DEV))
    assert y.is_contiguous()


def test_dim_errors_are_worded_like_torch():
    for shape, dim in [((2, 3), 2), ((2, 3), -3), ((), 1), ((4,), -2)]:
        x = torch.ones(shape, device=DEV)
        with pytest.raises(IndexError) as torch_error:
            torch.softmax(x, dim)
        with pytest.raises(IndexError) as ours:
            softmax(x, dim)
        assert str(ours.value) == str(torch_error.value)
    for bad in (None, 1.5, "0"):
        with pytest.raises(TypeError, match="'dim'.*must be int"):
            softmax(torch.ones(2, 3, device=DEV), bad)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_standard_cases(dtype):
    assert_softmax_correct(lambda x, out=None: softmax(x), dtype)


@pytest.mark.parametrize("shape,dim", [((2, 3, 40), -1), ((2, 3, 40), 0), ((2, 3, 40), 1), ((5, 7), 0),
                                       ((2, 2, 2, 9), 2), ((17,), 0), ((3, 1), -1)])
def test_any_dim_and_leading_dims(shape, dim):
    x = randn(shape, device=DEV)
    y = softmax(x, dim=dim)
    assert y.shape == x.shape and y.dtype == x.dtype
    _close(y, softmax_ref(x, dim=dim), x.dtype)


def test_non_contiguous_inputs():
    big = randn((6, 50), device=DEV)
    for x in (big[:, :33], big.t(), big[:, ::2], big[::3], big.t()[5:9]):
        _close(softmax(x), softmax_ref(x), x.dtype)
        _close(softmax(x, dim=0), softmax_ref(x, dim=0), x.dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_half_types_keep_their_dtype(dtype):
    x = randn((4, 300), dtype, DEV, scale=10.0)
    y = softmax(x)
    assert y.dtype == dtype
    _close(y, softmax_ref(x), dtype)


def test_empty_and_scalar():
    for shape, dim in [((0, 5), -1), ((5, 0), -1), ((2, 0, 3), 1), ((2, 0, 3), -1), ((0,), 0)]:
        x = torch.empty(shape, device=DEV)
        assert softmax(x, dim).shape == shape
    assert float(softmax(torch.tensor(3.0, device=DEV))) == 1.0


def test_nan_and_inf_like_torch():
    inf, nan = float("inf"), float("nan")
    x = torch.tensor([[1.0, nan, 2.0], [1.0, inf, 2.0], [-inf, -inf, -inf], [-inf, 0.0, 1.0], [inf, inf, 0.0]],
                     device=DEV)
    y, ref = softmax(x), torch.softmax(x.double(), -1)
    assert torch.equal(torch.isnan(y), torch.isnan(ref))
    torch.testing.assert_close(y.double(), ref, equal_nan=True)


def test_every_dispatch_path_is_correct():
    # Row lengths that take each branch of the tuning table (CPU: tiny row counts).
    seen = set()
    sms = torch.cuda.get_device_properties(0).multi_processor_count if DEV.type == "cuda" else 4
    many = sms + 1  # more rows than SMs (the branch that once chose online softmax)
    cases = [(3, 7), (5, 128), (3, 1000), (2, 3000), (2, 5000), (2, 20000), (2, 40000), (2, 60000), (many, 70000),
             (1, 140000)]
    cases += [(2, 4500), (2, 10000), (2, 30000)]  # the limits between powers of two (fused with other warps)
    halves = [(3, 200), (3, 700), (2, 5000), (2, 7000), (2, 12000), (2, 50000)]
    for shape, dtype in [(shape, torch.float32) for shape in cases] + [(shape, torch.bfloat16) for shape in halves]:
        name = softmax.choose(*shape, dtype)[0]
        seen.add(name)
        x = randn(shape, device=DEV).to(dtype)
        _close(softmax(x), softmax_ref(x), x.dtype)
    hopper = softmax_lab.ON_GPU and torch.cuda.get_device_capability() == (9, 0)
    gluon = {"resident", "clustered_tma"} if hopper else set()
    assert seen == {"multirow", "fused", "cooperative"} | gluon


def test_errors():
    with pytest.raises(TypeError, match="floating"):
        softmax(torch.ones(2, 3, dtype=torch.int64, device=DEV))
    assert softmax(torch.ones(2, 3, dtype=torch.float64, device=DEV)).dtype == torch.float64  # supported
    with pytest.raises(TypeError):
        softmax([1.0, 2.0])
    with pytest.raises(IndexError):
        softmax(torch.ones(2, 3, device=DEV), dim=2)
    x = torch.ones(2, 3, 4, device=DEV)
    with pytest.raises(ValueError, match="does not broadcast"):
        softmax(x, mask=torch.ones(5, 4, dtype=torch.bool, device=DEV))
    with pytest.raises(ValueError, match="bigger shape"):
        softmax(x, mask=torch.ones(7, 2, 3, 4, dtype=torch.bool, device=DEV))
    with pytest.raises(ValueError, match="mask is on"):
        softmax(x, mask=torch.ones(4, dtype=torch.bool, device="meta"))
    with pytest.raises(TypeError, match="mask"):
        softmax(x, mask=torch.ones(4, dtype=torch.int32, device=DEV))
    if DEV.type == "cuda":
        with pytest.raises(ValueError, match="kernels run on"):
            softmax(torch.ones(2, 3))


def test_mask_sdpa_convention():
    scores = randn((2, 2, 5, 5), device=DEV)
    causal = torch.ones(5, 5, dtype=torch.bool, device=DEV).tril()
    causal[0] = False  # a fully masked query row -> zeros
    for mask in (causal, torch.zeros(5, 5, device=DEV).masked_fill(~causal, float("-inf"))):
        y = softmax(scores, mask=mask)
        _close(y, masked_softmax_ref(scores, mask), scores.dtype)
        assert (y[:, :, 0] == 0).all()
    # along another dim: the mask moves with it
    y = softmax(scores, dim=2, mask=causal)
    ref = masked_softmax_ref(scores.transpose(2, 3), causal.t()).transpose(2, 3)
    _close(y, ref, scores.dtype)


@pytest.mark.parametrize("dim", [-1, 0, 1])
def test_autograd_matches_float64(dim):
    x = randn((3, 4, 33), device=DEV).requires_grad_()
    y = softmax(x, dim=dim)
    dy = randn(y.shape, device=DEV)
    (dx,) = torch.autograd.grad(y, x, dy)
    ref = softmax_backward_ref(softmax_ref(x, dim=dim), dy, dim=dim)
    torch.testing.assert_close(dx.double(), ref, atol=1e-5, rtol=1e-4)


def test_gradcheck():
    # gradcheck in float32 with matching tolerances (the kernels compute in float32, not float64).
    x = randn((3, 9), device=DEV, scale=1.0).requires_grad_()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "not double precision"
        assert torch.autograd.gradcheck(lambda t: softmax(t), (x,), eps=1e-2, atol=1e-3, rtol=1e-2)


def test_autograd_with_mask_and_half():
    scores = randn((1, 2, 4, 6), torch.float16, DEV).requires_grad_()
    mask = torch.rand(4, 6, device=DEV) > 0.4
    mask[2] = False
    y = softmax(scores, mask=mask)
    dy = randn(y.shape, torch.float16, DEV)
    (dx,) = torch.autograd.grad(y, scores, dy)
    ref = softmax_backward_ref(masked_softmax_ref(scores, mask), dy)
    assert (dx[:, :, 2] == 0).all()
    torch.testing.assert_close(dx.double(), ref, atol=1e-2, rtol=2e-2)


@settings(max_examples=15, deadline=None)
@given(shape=st.lists(st.integers(1, 9), min_size=1, max_size=3).map(tuple), cols=st.integers(1, 200),
       dtype=st.sampled_from(DTYPES), data=st.data())
def test_random_shapes_and_dims(shape, cols, dtype, data):
    full = shape + (cols,)
    dim = data.draw(st.integers(-len(full), len(full) - 1))
    x = randn(full, dtype, DEV)
    _close(softmax(x, dim=dim), softmax_ref(x, dim=dim), dtype)


def test_eager_fast_path_keeps_kinds_apart():
    # Plain eager calls reuse a plan per kind of input (shape, strides, dtype, device, alignment, dim): views
    # that share a shape but not strides or alignment, other dtypes and dims, interleaved, twice.
    big = randn((6, 65), device=DEV, seed=3)
    views = [big[:, :64], big[:, 1:], big[:, :64].contiguous(), big[:, :64].half(), big[::2, :64],
             big[:, :64].contiguous().reshape(2, 3, 64)]
    for _ in range(2):
        for v in views:
            for dim in (-1, v.dim() - 1, 0):
                _close(softmax(v, dim), softmax_ref(v, dim), v.dtype)
                assert softmax(v, dim).is_contiguous()
    # A plan for a shape does not let bad calls of that shape through, nor hide autograd.
    x = views[2]
    softmax(x)
    with pytest.raises(IndexError):
        softmax(x, 2)
    with pytest.raises(TypeError, match="'dim'"):
        softmax(x, True)
    with pytest.raises(TypeError, match="dense"):
        softmax(x.to_sparse())
    xg = x.detach().clone().requires_grad_()
    assert softmax(xg).requires_grad
    with torch.no_grad():
        assert not softmax(xg).requires_grad
