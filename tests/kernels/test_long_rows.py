"""The cooperative kernels (kernels/cooperative.py): rows shared by programs that wait for each other.

On the CPU interpreter they take their two-launch path (programs run one after another there); on a GPU both
paths are tested, the one-launch path in tests/kernels/test_gpu.py at full size too. Float64 references, poisoned
outputs, tiny BLOCKs so that every row is several chunks."""
import pytest
import torch

import softmax_lab
from softmax_lab import softmax
from softmax_lab.kernels import cooperative_softmax, pipelined_softmax, softmax_backward
from softmax_lab.reference import softmax_backward_ref, softmax_ref
from softmax_lab.testing import assert_softmax_correct, check_softmax, poisoned_like, randn, tolerance

DEV = softmax_lab.DEVICE
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
PATHS = [False, None] if softmax_lab.ON_GPU else [False]  # None: one launch when it fits (GPU only)


def coop(**knobs):
    return lambda x, out=None: cooperative_softmax(x, out=out, **knobs)


def _like_torch(y, x):
    ref = torch.softmax(x.double(), dim=-1)
    assert torch.equal(torch.isnan(y), torch.isnan(ref)), (y, ref)
    torch.testing.assert_close(y.double(), ref, atol=1e-6, rtol=1e-5, equal_nan=True)


@pytest.mark.parametrize("one_launch", PATHS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_standard_cases(dtype, one_launch):
    # Boundary shapes 1x1 ... 3x257, all-negative row, [1000, 1001, 1002], identical values, big[:, :1000].
    assert_softmax_correct(coop(BLOCK=32, one_launch=one_launch), dtype)
    assert_softmax_correct(coop(one_launch=one_launch), dtype, shapes=[(3, 70)], strided=False)  # default BLOCK


@pytest.mark.parametrize("one_launch", PATHS)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_keep_16_bit_exponentials(dtype, one_launch):
    # keep_16: exp(x - m) held in the input's 16-bit dtype across the wait (rounded twice: still within
    # the dtype's tolerance), on boundary shapes, strided inputs, long -inf runs and a fully -inf row.
    assert_softmax_correct(coop(BLOCK=32, keep_16=True, one_launch=one_launch), dtype)
    x = randn((3, 100), device=DEV).to(dtype)
    x[:, :40] = float("-inf")
    x[1, :] = float("-inf")
    y = cooperative_softmax(x, BLOCK=16, keep_16=True, one_launch=one_launch)
    atol, rtol = tolerance(dtype)
    torch.testing.assert_close(y.double(), torch.softmax(x.double(), -1), atol=atol, rtol=rtol, equal_nan=True)
    assert (y[0, :40] == 0).all() and torch.isnan(y[1]).all()


@pytest.mark.parametrize("one_launch", PATHS)
def test_chunks_strides_and_out(one_launch):
    big = randn((5, 150), device=DEV)
    for x in (big, big[:, :137], big[::2, 5:140]):
        for knobs in (dict(BLOCK=16), dict(BLOCK=64), dict(BLOCK=16, tiles=3), dict(BLOCK=8, tiles=2)):
            assert check_softmax(coop(num_warps=1, one_launch=one_launch, **knobs), x) == "", knobs
    x = randn((3, 70), device=DEV)
    out = poisoned_like(x)
    y = cooperative_softmax(x, out=out, BLOCK=16, one_launch=one_launch)
    assert y.data_ptr() == out.data_ptr()
    torch.testing.assert_close(out.double(), softmax_ref(x), atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("one_launch", PATHS)
def test_nan_inf_and_minus_inf_chunks(one_launch):
    inf, nan = float("inf"), float("nan")
    x = torch.tensor([[1.0, nan, 2.0, 0.5, 1.0],
                      [1.0, inf, 2.0, 0.5, 1.0],       # +inf -> NaN (inf - inf), like torch
                      [-inf, -inf, -inf, -inf, -inf],  # fully -inf row -> NaN, like torch
                      [-inf, 3.0, -inf, 1.0, -inf],
                      [-1e30, -1e30, 0.0, -5.0, -1e30]], device=DEV)
    for knobs in (dict(BLOCK=2), dict(BLOCK=2, tiles=2), dict(BLOCK=1, tiles=4)):
        _like_torch(cooperative_softmax(x, one_launch=one_launch, **knobs), x)
    # Long -inf runs: whole chunks of -inf before, between and after the finite values.
    x = randn((3, 100), device=DEV)
    x[:, :40] = -inf
    x[:, 60:] = -inf
    x[1, :] = -inf
    x[2, 45:] = -1000.0  # a chunk far below the row max: its scale exp(m - M) underflows to 0
    for knobs in (dict(BLOCK=16), dict(BLOCK=8, tiles=3), dict(BLOCK=32, tiles=2)):
        y = cooperative_softmax(x, one_launch=one_launch, **knobs)
        _like_torch(y, x)
        assert (y[0, :40] == 0).all() and (y[0, 60:] == 0).all() and torch.isnan(y[1]).all()


def test_errors_and_empty():
    with pytest.raises(TypeError, match="dtype"):
        cooperative_softmax(torch.ones(2, 3, dtype=torch.int32, device=DEV))
    with pytest.raises(ValueError, match="2-D"):
        cooperative_softmax(torch.ones(2, 3, 4, device=DEV))
    with pytest.raises(ValueError, match="out"):
        cooperative_softmax(torch.ones(2, 3, device=DEV), out=torch.empty(3, 2, device=DEV))
    for shape in [(0, 5), (3, 0)]:
        assert cooperative_softmax(torch.empty(shape, device=DEV)).shape == shape
    if not softmax_lab.ON_GPU:
        with pytest.raises(ValueError, match="one after another"):
            cooperative_softmax(torch.ones(2, 40), BLOCK=16, one_launch=True)


@pytest.mark.parametrize("seed", range(6))
def test_random_shapes(seed):
    g = torch.Generator().manual_seed(seed)
    rows, cols = int(torch.randint(1, 7, (), generator=g)), int(torch.randint(1, 400, (), generator=g))
    dtype = DTYPES[seed % 3]
    block, tiles = [8, 32, 128][seed % 3], [1, 2, 1][seed % 3]
    x = randn((rows, cols), dtype, DEV, scale=[0.1, 3.0, 100.0][seed % 3], seed=seed)
    for one_launch in PATHS:
        assert check_softmax(coop(BLOCK=block, tiles=tiles, one_launch=one_launch), x) == ""


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_backward_long_row_path(dtype):
    # BLOCK shorter than the row: softmax_backward takes the cooperative path (chunks=...: the two-launch one).
    for shape, knobs in [((3, 70), dict(BLOCK=16)), ((2, 33), dict(BLOCK=8, num_warps=1)),
                         ((3, 70), dict(BLOCK=16, chunks=3))]:
        y = torch.softmax(randn(shape, device=DEV), -1).to(dtype)
        dy = randn(shape, dtype, DEV)
        out = poisoned_like(y)
        dx = softmax_backward(y, dy, out=out, **knobs)
        assert dx.data_ptr() == out.data_ptr()
        atol, rtol = tolerance(dtype)
        torch.testing.assert_close(dx.double(), softmax_backward_ref(y, dy), atol=atol * 10, rtol=rtol)


# ---- pipelined_softmax: the same handshake, a fixed set of programs looping with the next load in flight ----
def pipe(**knobs):
    return lambda x, out=None: pipelined_softmax(x, out=out, **knobs)


@pytest.mark.parametrize("one_launch", PATHS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_pipelined_standard_cases(dtype, one_launch):
    assert_softmax_correct(pipe(BLOCK=32, one_launch=one_launch), dtype)
    assert_softmax_correct(pipe(BLOCK=16, programs=3, keep_16=True, one_launch=one_launch), dtype,
                           shapes=[(3, 70), (1, 1), (4, 33)])


@pytest.mark.parametrize("one_launch", PATHS)
def test_pipelined_programs_strides_out_and_minus_inf(one_launch):
    big = randn((5, 150), device=DEV)
    for x in (big, big[:, :137], big[::2, 5:140]):
        for knobs in (dict(BLOCK=16), dict(BLOCK=64, programs=1), dict(BLOCK=8, programs=7, num_warps=1)):
            assert check_softmax(pipe(one_launch=one_launch, **knobs), x) == "", knobs
    x = randn((4, 100), device=DEV)
    x[:, :40] = float("-inf")  # whole chunks of -inf, a fully -inf row, a chunk whose scale underflows
    x[1, :] = float("-inf")
    x[2, 60:] = -1000.0
    x[3, 50] = float("nan")
    for knobs in (dict(BLOCK=16), dict(BLOCK=8, programs=2), dict(BLOCK=1, programs=5)):
        y = pipelined_softmax(x, one_launch=one_launch, **knobs)
        _like_torch(y, x)
        assert (y[0, :40] == 0).all() and torch.isnan(y[1]).all() and torch.isnan(y[3]).all()
    for shape in [(0, 5), (3, 0)]:
        assert pipelined_softmax(torch.empty(shape, device=DEV)).shape == shape
    with pytest.raises(TypeError, match="dtype"):
        pipelined_softmax(torch.ones(2, 3, dtype=torch.int32, device=DEV))
    if not softmax_lab.ON_GPU:
        with pytest.raises(ValueError, match="one after another"):
            pipelined_softmax(torch.ones(2, 40), BLOCK=16, one_launch=True)


def test_dispatcher_sends_long_rows_here():
    # rows shared by programs: the cooperative kernel, or on a Hopper GPU a cluster of programs (clustered.py)
    shared = ("cooperative", "clustered") if softmax_lab.ON_GPU else ("cooperative",)
    assert softmax.choose(4, 40000, torch.float32)[0] in shared
    assert softmax.choose(4, 40000, torch.bfloat16)[0] in shared
    x = randn((2, 40000), device=DEV, seed=5)  # 5 (fp32) chunks per row at the dispatcher's BLOCK
    x[1, :20000] = float("-inf")
    torch.testing.assert_close(softmax(x).double(), softmax_ref(x), atol=1e-6, rtol=1e-5)
    xb = x.to(torch.bfloat16)  # bf16: 3 chunks of 16384 per row
    atol, rtol = tolerance(torch.bfloat16)
    torch.testing.assert_close(softmax(xb).double(), softmax_ref(xb), atol=atol, rtol=rtol)
    torch.testing.assert_close(pipelined_softmax(xb).double(), softmax_ref(xb), atol=atol, rtol=rtol)
