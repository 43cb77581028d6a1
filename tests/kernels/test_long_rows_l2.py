"""l2_reread_softmax (kernels/l2_reread.py): a fixed set of programs that read each chunk twice, the second time
from L2, and wait for their row's partners in between.

On the CPU interpreter it takes its two-launch path (programs run one after another); on a GPU both paths
are tested, and the one-launch path at a size where rows have hundreds of chunks. Float64 references,
poisoned outputs, tiny BLOCKs so that every row is several chunks of several tiles."""
import pytest
import torch

import softmax_lab
from softmax_lab.kernels import l2_reread_softmax
from softmax_lab.reference import softmax_ref
from softmax_lab.testing import assert_softmax_correct, check_softmax, poisoned_like, randn, tolerance

DEV = softmax_lab.DEVICE
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
PATHS = [False, None] if softmax_lab.ON_GPU else [False]  # None: one launch when it fits (GPU only)


def l2(**knobs):
    return lambda x, out=None: l2_reread_softmax(x, out=out, **knobs)


def _like_torch(y, x):
    ref = torch.softmax(x.double(), dim=-1)
    assert torch.equal(torch.isnan(y), torch.isnan(ref)), (y, ref)
    atol, rtol = tolerance(x.dtype)
    torch.testing.assert_close(y.double(), ref, atol=atol, rtol=rtol, equal_nan=True)


@pytest.mark.parametrize("one_launch", PATHS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_standard_cases(dtype, one_launch):
    # Boundary shapes 1x1 ... 3x257, all-negative row, [1000, 1001, 1002], identical values, big[:, :1000].
    assert_softmax_correct(l2(BLOCK=32, tiles=2, programs=5, one_launch=one_launch), dtype)
    assert_softmax_correct(l2(one_launch=one_launch), dtype, shapes=[(3, 70)], strided=False)  # defaults


@pytest.mark.parametrize("one_launch", PATHS)
def test_tiles_programs_strides_and_out(one_launch):
    big = randn((5, 150), device=DEV)
    for x in (big, big[:, :137], big[::2, 5:140]):  # boundary lengths, strided rows
        for knobs in (dict(BLOCK=16), dict(BLOCK=16, tiles=3, programs=4), dict(BLOCK=8, tiles=2, programs=40),
                      dict(BLOCK=64, programs=1), dict(BLOCK=128, tiles=1, programs=3)):
            assert check_softmax(l2(num_warps=1, one_launch=one_launch, **knobs), x) == "", knobs
    x = randn((3, 70), device=DEV)
    out = poisoned_like(x)
    y = l2_reread_softmax(x, out=out, BLOCK=16, tiles=2, one_launch=one_launch)
    assert y.data_ptr() == out.data_ptr()
    torch.testing.assert_close(out.double(), softmax_ref(x), atol=1e-6, rtol=1e-5)
    wide = poisoned_like(randn((3, 90), device=DEV))[:, 5:75]  # a strided output view
    y = l2_reread_softmax(x, out=wide, BLOCK=8, tiles=3, programs=2, one_launch=one_launch)
    torch.testing.assert_close(wide.double(), softmax_ref(x), atol=1e-6, rtol=1e-5)
    x2 = x.clone()  # in place: out is x
    l2_reread_softmax(x2, out=x2, BLOCK=16, tiles=2, programs=3, one_launch=one_launch)
    torch.testing.assert_close(x2.double(), softmax_ref(x), atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("one_launch", PATHS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_minus_inf_runs_nan_and_inf(dtype, one_launch):
    inf, nan = float("inf"), float("nan")
    x = torch.tensor([[1.0, nan, 2.0, 0.5, 1.0],
                      [1.0, inf, 2.0, 0.5, 1.0],       # +inf -> NaN (inf - inf), like torch
                      [-inf, -inf, -inf, -inf, -inf],  # fully -inf row -> NaN, like torch
                      [-inf, 3.0, -inf, 1.0, -inf],
                      [-1e30, -1e30, 0.0, -5.0, -1e30]], device=DEV).to(dtype)
    for knobs in (dict(BLOCK=2), dict(BLOCK=2, tiles=2, programs=3), dict(BLOCK=1, tiles=4, programs=7)):
        _like_torch(l2_reread_softmax(x, one_launch=one_launch, **knobs), x)
    # Long -inf runs: whole chunks and whole tiles of -inf before, between and after the finite values.
    x = randn((4, 100), device=DEV).to(dtype)
    x[:, :40] = -inf
    x[:, 60:] = -inf
    x[1, :] = -inf
    x[2, 45:60] = -1000.0  # a chunk far below the row max: its scale exp(m - M) underflows to 0
    x[3, 41:59] = -inf     # one finite value left per side
    for knobs in (dict(BLOCK=16), dict(BLOCK=8, tiles=3, programs=2), dict(BLOCK=4, tiles=2, programs=50)):
        y = l2_reread_softmax(x, one_launch=one_launch, **knobs)
        _like_torch(y, x)
        assert (y[0, :40] == 0).all() and (y[0, 60:] == 0).all() and torch.isnan(y[1]).all()


@pytest.mark.parametrize("seed", range(4))
def test_random_shapes(seed):
    g = torch.Generator().manual_seed(seed)
    rows, cols = int(torch.randint(1, 7, (), generator=g)), int(torch.randint(1, 400, (), generator=g))
    dtype = DTYPES[seed % 3]
    knobs = [dict(BLOCK=8, tiles=3), dict(BLOCK=32, programs=2), dict(BLOCK=128, tiles=2, programs=9),
             dict(BLOCK=16, tiles=1, programs=1)][seed]
    x = randn((rows, cols), dtype, DEV, scale=[0.1, 3.0, 100.0, 3.0][seed], seed=seed)
    for one_launch in PATHS:
        assert check_softmax(l2(one_launch=one_launch, **knobs), x) == "", knobs


def test_errors_and_empty():
    with pytest.raises(TypeError, match="dtype"):
        l2_reread_softmax(torch.ones(2, 3, dtype=torch.int32, device=DEV))
    with pytest.raises(ValueError, match="2-D"):
        l2_reread_softmax(torch.ones(2, 3, 4, device=DEV))
    with pytest.raises(ValueError, match="out"):
        l2_reread_softmax(torch.ones(2, 3, device=DEV), out=torch.empty(3, 2, device=DEV))
    with pytest.raises(ValueError, match="positive"):
        l2_reread_softmax(torch.ones(2, 3, device=DEV), programs=0)
    with pytest.raises(ValueError, match="power of two"):
        l2_reread_softmax(torch.ones(2, 3, device=DEV), BLOCK=12)
    for shape in [(0, 5), (3, 0)]:
        assert l2_reread_softmax(torch.empty(shape, device=DEV)).shape == shape
    if softmax_lab.ON_GPU:  # a row of 4 chunks cannot wait on 2 programs
        with pytest.raises(ValueError, match="no more than"):
            l2_reread_softmax(torch.ones(2, 64, device=DEV), BLOCK=16, tiles=1, programs=2, one_launch=True)
    else:
        with pytest.raises(ValueError, match="one after another"):
            l2_reread_softmax(torch.ones(2, 40), BLOCK=16, one_launch=True)


@pytest.mark.gpu
@pytest.mark.skipif(not softmax_lab.ON_GPU, reason="needs a GPU")
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_one_launch_full_size(dtype):
    # Rows of hundreds of chunks, programs looping over many items, partners spread over the whole GPU.
    x = randn((6, 1 << 20), dtype, DEV, seed=3)
    x[1, : 1 << 19] = float("-inf")
    x[2] = float("-inf")
    for knobs in (dict(), dict(BLOCK=2048, num_warps=4, programs=264), dict(BLOCK=1024, tiles=2),
                  dict(BLOCK=4096, tiles=4, num_warps=8)):
        out = poisoned_like(x)
        l2_reread_softmax(x, out=out, one_launch=True, **knobs)
        _like_torch(out, x)


def test_dispatcher_sends_the_longest_fp32_rows_here():
    # The H200 run (benchmarks/records/h200-sweep-cooperative-l2.json): fp32 rows past 1,048,576 elements;
    # 16-bit and shorter rows not.
    from softmax_lab import softmax

    assert softmax.choose(2, 1048577, torch.float32)[0] == "l2_reread"
    assert softmax.choose(16, 1048576, torch.float32)[0] == "cooperative"
    assert softmax.choose(2, 1048577, torch.bfloat16)[0] == "cooperative"
    x = randn((2, 1048577), device=DEV, seed=7)  # 129 chunks of 8192 per row at the dispatcher's knobs
    x[1, :600000] = float("-inf")
    torch.testing.assert_close(softmax(x).double(), softmax_ref(x), atol=1e-6, rtol=1e-5)
