"""staged_softmax / staged_backward (kernels/staged.py): chunks copied by the TMA, a fixed set of programs looping
over (row, chunk) items, partners exchanging (m, l) as one 64-bit word.

On the CPU interpreter they take their two-launch path (programs run one after another); on a GPU both paths
are tested, the one-launch path also where rows have hundreds of chunks and past 2**31 elements. Float64
references, poisoned outputs, tiny BLOCKs so that rows are many chunks. The TMA needs 16-byte aligned rows:
``aligned`` gives the boundary shapes such rows (a padded buffer, viewed back to the shape)."""
import pytest
import torch

import softmax_lab
import sys; sys.path.insert(0, "results")  # noqa: E702
from probe_staged import can_stage, staged_backward, staged_softmax
from softmax_lab.reference import softmax_ref
from softmax_lab.testing import assert_softmax_correct, check_softmax, poisoned_like, randn, tolerance

DEV = softmax_lab.DEVICE
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
PATHS = [False, None] if softmax_lab.ON_GPU else [False]  # None: one launch (GPU only)


def aligned(x):
    """``x`` itself when the TMA can read it, else the same values in rows padded to 16 bytes."""
    if can_stage(x):
        return x
    step = 16 // x.element_size()
    buf = torch.empty((x.shape[0], -(-x.shape[1] // step) * step), dtype=x.dtype, device=x.device)
    buf[:, : x.shape[1]] = x
    return buf[:, : x.shape[1]]


def staged(**knobs):
    return lambda x, out=None: staged_softmax(aligned(x), out=out, **knobs)


def _like_torch(y, x):
    ref = torch.softmax(x.double(), dim=-1)
    assert torch.equal(torch.isnan(y), torch.isnan(ref)), (y, ref)
    atol, rtol = tolerance(x.dtype)
    torch.testing.assert_close(y.double(), ref, atol=atol, rtol=rtol, equal_nan=True)


@pytest.mark.parametrize("one_launch", PATHS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_standard_cases(dtype, one_launch):
    # Boundary shapes 1x1 ... 3x257, all-negative row, [1000, 1001, 1002], identical values, big[:, :1000].
    assert_softmax_correct(staged(BLOCK=32, programs=5, one_launch=one_launch), dtype)
    assert_softmax_correct(staged(BLOCK=16, STAGES=3, one_launch=one_launch), dtype)
    assert_softmax_correct(staged(one_launch=one_launch), dtype)  # defaults: a whole row per chunk here


@pytest.mark.parametrize("one_launch", PATHS)
def test_chunks_programs_stages_strides_and_out(one_launch):
    big = randn((5, 160), device=DEV)
    for x in (big, big[:, :136], big[::2, 8:144]):  # boundary lengths, strided rows (16-byte aligned)
        for knobs in (dict(BLOCK=16), dict(BLOCK=16, STAGES=4, programs=40), dict(BLOCK=8, programs=60),
                      dict(BLOCK=64, programs=3), dict(BLOCK=256, programs=1), dict(BLOCK=32, STAGES=1)):
            assert check_softmax(staged(num_warps=1, one_launch=one_launch, **knobs), x) == "", knobs
    x = randn((3, 72), device=DEV)
    out = poisoned_like(x)
    y = staged_softmax(x, out=out, BLOCK=16, one_launch=one_launch)
    assert y.data_ptr() == out.data_ptr()
    torch.testing.assert_close(out.double(), softmax_ref(x), atol=1e-6, rtol=1e-5)
    wide = poisoned_like(randn((3, 90), device=DEV))[:, 5:77]  # a strided, unaligned output view: plain stores
    staged_softmax(x, out=wide, BLOCK=8, programs=9, one_launch=one_launch)
    torch.testing.assert_close(wide.double(), softmax_ref(x), atol=1e-6, rtol=1e-5)
    x2 = x.clone()  # in place: out is x (each chunk is read and written by the same program)
    staged_softmax(x2, out=x2, BLOCK=16, programs=5, one_launch=one_launch)
    torch.testing.assert_close(x2.double(), softmax_ref(x), atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("one_launch", PATHS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_minus_inf_runs_nan_and_inf(dtype, one_launch):
    inf, nan = float("inf"), float("nan")
    x = torch.tensor([[1.0, nan, 2.0, 0.5, 1.0, 1.0, 1.0, 1.0],
                      [1.0, inf, 2.0, 0.5, 1.0, 1.0, 1.0, 1.0],  # +inf -> NaN (inf - inf), like torch
                      [-inf] * 8,                                 # fully -inf row -> NaN, like torch
                      [-inf, 3.0, -inf, 1.0, -inf, -inf, -inf, -inf],
                      [-1e30, -1e30, 0.0, -5.0, -1e30, -inf, 2.0, -1e30]], device=DEV).to(dtype)
    for knobs in (dict(BLOCK=8), dict(BLOCK=16, programs=3), dict(BLOCK=8, programs=7, STAGES=3)):
        _like_torch(staged_softmax(x, one_launch=one_launch, **knobs), x)
    # Long -inf runs: whole chunks of -inf before, between and after the finite values.
    x = randn((4, 104), device=DEV).to(dtype)
    x[:, :40] = -inf
    x[:, 64:] = -inf
    x[1, :] = -inf
    x[2, 48:64] = -1000.0  # a chunk far below the row max: its scale exp(m - M) underflows to 0
    x[3, 41:63] = -inf     # one finite value left per side
    for knobs in (dict(BLOCK=16), dict(BLOCK=8, programs=13), dict(BLOCK=8, STAGES=4, programs=50)):
        y = staged_softmax(x, one_launch=one_launch, **knobs)
        _like_torch(y, x)
        assert (y[0, :40] == 0).all() and (y[0, 64:] == 0).all() and torch.isnan(y[1]).all()


@pytest.mark.parametrize("seed", range(4))
def test_random_shapes_forward_and_backward(seed):
    g = torch.Generator().manual_seed(seed)
    rows, cols = int(torch.randint(1, 7, (), generator=g)), int(torch.randint(1, 400, (), generator=g))
    dtype = DTYPES[seed % 3]
    knobs = [dict(BLOCK=8, STAGES=3), dict(BLOCK=32, programs=2), dict(BLOCK=128, programs=9),
             dict(BLOCK=16, STAGES=1, programs=40)][seed]
    x = aligned(randn((rows, cols), dtype, DEV, scale=[0.1, 3.0, 100.0, 3.0][seed], seed=seed))
    y = aligned(torch.softmax(x.float(), -1).to(dtype))
    dy = aligned(randn((rows, cols), dtype, DEV, seed=seed + 10))
    ref = y.double() * (dy.double() - (y.double() * dy.double()).sum(-1, keepdim=True))
    atol, rtol = tolerance(dtype)
    for one_launch in PATHS:
        assert check_softmax(staged(one_launch=one_launch, **knobs), x) == "", knobs
        dx = poisoned_like(y)
        staged_backward(y, dy, dx, one_launch=one_launch, **knobs)
        torch.testing.assert_close(dx.double(), ref, atol=10 * atol, rtol=rtol)


def test_backward_chunks_and_zero_rows():
    y = torch.softmax(randn((3, 200), device=DEV, seed=1), -1)
    dy = randn((3, 200), device=DEV, seed=2)
    dy[1] = 0.0
    ref = y.double() * (dy.double() - (y.double() * dy.double()).sum(-1, keepdim=True))
    for knobs in (dict(BLOCK=16), dict(BLOCK=64, programs=4), dict(BLOCK=8, STAGES=3, programs=30)):
        dx = poisoned_like(y)
        staged_backward(y, dy, dx, **knobs)
        torch.testing.assert_close(dx.double(), ref, atol=1e-6, rtol=1e-5)
        assert (dx[1] == 0).all()


def test_errors_and_empty():
    with pytest.raises(TypeError, match="dtype"):
        staged_softmax(torch.ones(2, 4, dtype=torch.int32, device=DEV))
    with pytest.raises(ValueError, match="2-D"):
        staged_softmax(torch.ones(2, 4, 4, device=DEV))
    with pytest.raises(ValueError, match="positive"):
        staged_softmax(torch.ones(2, 4, device=DEV), programs=0)
    with pytest.raises(ValueError, match="power of two"):
        staged_softmax(torch.ones(2, 4, device=DEV), BLOCK=12)
    with pytest.raises(ValueError, match="16-byte aligned"):
        staged_softmax(torch.ones(2, 5, device=DEV))  # rows of 20 bytes
    with pytest.raises(ValueError, match="16-byte aligned"):
        staged_softmax(torch.ones(2, 9, device=DEV)[:, 1:])  # a base 4 bytes past alignment
    for shape in [(0, 8), (3, 0)]:
        assert staged_softmax(torch.empty(shape, device=DEV)).shape == shape
    if softmax_lab.ON_GPU:  # a row of 4 chunks cannot wait on 2 programs
        with pytest.raises(ValueError, match="chunks per row"):
            staged_softmax(torch.ones(2, 64, device=DEV), BLOCK=16, programs=2, one_launch=True)
    else:
        with pytest.raises(ValueError, match="one after another"):
            staged_softmax(torch.ones(2, 40), BLOCK=16, one_launch=True)


@pytest.mark.gpu
@pytest.mark.skipif(not softmax_lab.ON_GPU, reason="needs a GPU")
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_one_launch_full_size(dtype):
    # Rows of hundreds of chunks, programs looping over many items, partners spread over the whole GPU.
    x = randn((6, 1 << 20), dtype, DEV, seed=3)
    x[1, : 1 << 19] = float("-inf")
    x[2] = float("-inf")
    for knobs in (dict(), dict(BLOCK=2048, num_warps=4), dict(BLOCK=4096, STAGES=3), dict(BLOCK=16384, STAGES=2)):
        out = poisoned_like(x)
        staged_softmax(x, out=out, one_launch=True, **knobs)
        _like_torch(out, x)


@pytest.mark.gpu
@pytest.mark.skipif(not softmax_lab.ON_GPU, reason="needs a GPU")
def test_past_two_to_the_31_elements():
    # 32769 rows of 65536 bf16: 2**31 + 65536 elements; the last rows' offsets need 64-bit arithmetic.
    x = torch.randn((32769, 65536), dtype=torch.bfloat16, device="cuda")
    x[-1, :1000] = float("-inf")
    out = torch.full_like(x, float("nan"))
    staged_softmax(x, out=out)
    for r in (0, 16384, 32767, 32768):
        _like_torch(out[r:r + 1], x[r:r + 1])
    del out
    dx = torch.full_like(x, float("nan"))
    y = torch.softmax(x[-2:].float(), -1).to(x.dtype)
    x[-2:] = y
    staged_backward(x, x, dx)  # dy = y: dx = y·(y - Σ y²)
    yd = y.double()
    torch.testing.assert_close(dx[-2:].double(), yd * (yd - (yd * yd).sum(-1, keepdim=True)), atol=1e-3, rtol=2e-2)
