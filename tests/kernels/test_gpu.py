"""GPU-only tests: sizes the interpreter cannot run. On the GPU machine: make test-gpu
(python3 -m pytest tests -m "gpu or not gpu"). Skipped without CUDA."""
import re

import pytest
import torch
import triton

from softmax_lab import kernels, softmax
from softmax_lab.kernels import (ALL, cooperative_backward, cooperative_softmax, masked_softmax, pipelined_softmax,
                                 softmax_backward)
from softmax_lab.kernels._launch import shared_memory_cols
from softmax_lab.kernels.cooperative import cooperative_softmax_kernel, resident_programs
from softmax_lab.reference import masked_softmax_ref, softmax_backward_ref
from softmax_lab.testing import assert_softmax_correct, check_softmax, tolerance

pytestmark = pytest.mark.gpu
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
BF16 = torch.bfloat16
# The dispatcher takes the Gluon kernels on the GPU they were tuned on (dispatch.GLUON_CAPABILITY); clusters need 9.0.
HOPPER = pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
                            reason="needs a Hopper GPU (compute capability 9.0)")


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
    ("multirow_tail", (65536, 130)), ("multirow_tail", (100_000, 77)), ("multirow_tail", (3000, 1030)),
    ("online", (200, 100_000)), ("online", (3, 1 << 20)), ("split_row", (16, 1 << 20)),
    ("split_row", (5, 300_001))])
def test_kernels_at_gpu_sizes(name, shape):
    fn = (lambda t, out=None: ALL["multirow"](t, out=out, tail=True)) if name == "multirow_tail" else ALL[name]
    for dtype in (torch.float32, torch.bfloat16):
        x = _randn(shape, dtype)
        assert check_softmax(fn, x) == ""


# The benchmark's shapes, through the dispatcher.
BENCH_SHAPES = [((4096, 1024), torch.float32), ((65536, 512), torch.float16), ((65536, 512), torch.bfloat16),
                ((32768, 1000), torch.float32), ((65536, 128), torch.float32), ((32768, 2048), torch.float16),
                ((16384, 4096), torch.float32), ((8192, 8192), torch.bfloat16), ((4096, 16384), torch.float32),
                ((2048, 32768), torch.bfloat16), ((1024, 65536), torch.float32), ((1024, 65536), torch.bfloat16),
                ((4096, 131072), torch.bfloat16), ((256, 262144), torch.float32), ((16, 1048576), torch.float32),
                ((8, 4194304), torch.float32)]


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
    y = ALL["multirow"](x[:, :1000], tail=True)  # 1000 = 512 + a tail of 512 (488 used), rows 1024 apart
    _check_rows(y, x[:, :1000], rows)
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


# ---- cooperative kernels (rows shared by programs that wait for each other): the one-launch path ----------


@pytest.mark.parametrize("shape", [(1024, 65536), (300, 100_000), (7, (1 << 20) + 3), (3, 1 << 22), (5000, 33000)])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_cooperative_at_gpu_sizes(shape, dtype):
    x = _randn(shape, dtype)
    n = shape[1]
    x[0, : n // 2] = float("-inf")          # a long -inf run: whole chunks of -inf
    x[-1, n // 3: 2 * n // 3] = float("-inf")
    if shape[0] > 2:
        x[1] = float("-inf")                 # a fully -inf row gives NaN, like torch.softmax
    y = torch.full_like(x, float("nan"))
    cooperative_softmax(x, out=y)
    rows = [r for r in range(shape[0]) if r != 1 or shape[0] <= 2]
    _check_rows(y, x, rows[:64] + rows[-64:])
    if shape[0] > 2:
        assert torch.isnan(y[1]).all()
    y2 = cooperative_softmax(x, one_launch=False)  # the two-launch path gives the same result
    torch.testing.assert_close(y2, y, atol=0, rtol=0, equal_nan=True)
    for knobs in (dict(tiles=2), dict(BLOCK=4096, num_warps=4)):  # tiles read twice; smaller programs
        y3 = cooperative_softmax(x, **knobs)
        _check_rows(y3, x, rows[:64] + rows[-64:])


@pytest.mark.parametrize("shape", [(1024, 65536), (300, 100_000), (7, (1 << 20) + 3), (5000, 33000)])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_pipelined_and_keep_16_at_gpu_sizes(shape, dtype):
    x = _randn(shape, dtype)
    n = shape[1]
    x[0, : n // 2] = float("-inf")
    x[1] = float("-inf")
    rows = [0] + list(range(2, min(shape[0], 64))) + [shape[0] - 1]
    for f, knobs in ((pipelined_softmax, {}), (pipelined_softmax, dict(keep_16=True)),
                     (pipelined_softmax, dict(one_launch=False, BLOCK=8192)), (pipelined_softmax, dict(programs=200)),
                     (cooperative_softmax, dict(keep_16=True))):
        y = torch.full_like(x, float("nan"))
        f(x, out=y, **knobs)
        _check_rows(y, x, rows)
        assert torch.isnan(y[1]).all(), (f, knobs)


def test_pipelined_more_than_2_31_elements():
    n_rows = (1 << 15) + 1  # 32769 rows of 65536 fp16 = 2.15e9 elements
    x = torch.empty((n_rows, 65536), dtype=torch.float16, device="cuda")
    x.normal_(0, 3)
    rows = torch.tensor([0, 1, n_rows // 2, n_rows - 2, n_rows - 1], device="cuda")
    _check_rows(pipelined_softmax(x, keep_16=True), x, rows)


def test_eager_fast_path_matches_the_launchers():
    # softmax_lab.softmax's plans launch the compiled kernel directly: same bits as the launcher, for aligned
    # and misaligned views (Triton compiles one kernel per 16-byte alignment), on two streams.
    from softmax_lab import dispatch

    big = _randn((4096, 1025))
    for x in (big[:, :1024], big[:, 1:], big[:, :1024].contiguous(), _randn((65536, 128)), _randn((64, 8192), BF16)):
        name, knobs = dispatch._runnable(x)  # (rows off 16 bytes: the unaligned kernel)
        launch = dispatch.LAUNCHERS[name]
        for _ in range(3):
            torch.testing.assert_close(softmax(x), launch(x, **knobs), atol=0, rtol=0)
        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream):
            y = softmax(x)
        stream.synchronize()
        torch.testing.assert_close(y, launch(x, **knobs), atol=0, rtol=0)


def test_cooperative_knobs_and_strides():
    big = _randn((600, 70000))
    for x in (big, big[:, 100:65636], big[::3, :66000]):
        for knobs in (dict(BLOCK=2048, num_warps=2), dict(BLOCK=4096, num_warps=4), dict(BLOCK=16384, num_warps=16),
                      dict(BLOCK=4096, num_warps=4, tiles=4), dict(BLOCK=8192, tiles=2)):
            assert check_softmax(lambda t, out=None: cooperative_softmax(t, out=out, **knobs), x) == ""


def test_cooperative_one_launch_guard():
    x = _randn((1, 1 << 23))
    pairs = torch.empty(2 * 8192, device="cuda")
    counts = torch.zeros(2, dtype=torch.int32, device="cuda")
    args = (x, x, pairs, counts, x.stride(0), x.stride(0), x.shape[1], 8192)
    held = resident_programs(cooperative_softmax_kernel, args, (1,), x.device, PUBLISH=True, FINISH=True,
                             BLOCK=1024, TILES=1, CHUNKS=8192, KEEP_16=False, num_warps=4)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    assert sms <= held <= 16 * sms  # 4 warps a program: at most 2048 / 128 = 16 programs per SM
    with pytest.raises(ValueError, match="wait for ever"):
        cooperative_softmax(x, BLOCK=1024, num_warps=4, one_launch=True)  # 8192 programs per row
    _check_rows(cooperative_softmax(x, BLOCK=1024, num_warps=4), x, slice(None))  # falls back to two launches


def test_cooperative_more_than_2_31_elements():
    # 32769 rows of 65536 fp16 = 2.15e9 elements: row * stride passes 2**31.
    n_rows = (1 << 15) + 1
    x = torch.empty((n_rows, 65536), dtype=torch.float16, device="cuda")
    x.normal_(0, 3)
    rows = torch.tensor([0, 1, n_rows // 2, n_rows - 2, n_rows - 1], device="cuda")
    y = softmax(x)
    _check_rows(y, x, rows)
    dy = torch.randn_like(y)
    dx = softmax_backward(y, dy)
    torch.testing.assert_close(dx[rows].double(), softmax_backward_ref(y[rows], dy[rows]), atol=1e-2, rtol=1e-2)


@pytest.mark.parametrize("shape", [(1024, 65536), (16, 1 << 20), (5, 300_001)])
def test_cooperative_backward_gpu(shape):
    for dtype in DTYPES:
        y = torch.softmax(_randn(shape), -1).to(dtype)
        dy = _randn(shape, dtype)
        atol, rtol = tolerance(dtype)
        dx = torch.full_like(y, float("nan"))
        cooperative_backward(y, dy, dx)
        ref_rows = [0, shape[0] // 2, shape[0] - 1]
        torch.testing.assert_close(dx[ref_rows].double(), softmax_backward_ref(y[ref_rows], dy[ref_rows]),
                                   atol=atol * 10, rtol=rtol)
        assert not torch.isnan(dx).any()


def _hard_rows(n_rows, n, dtype, keep):
    """(padded, x, rows): x = padded[:, :n], rows starting on 16 bytes whatever n is, with row 0 half -inf, row 1
    all -inf (NaN, like torch) and row 2 all-negative; ``rows``: the first and last ``keep`` rows but row 1."""
    vec = 16 // torch.empty((), dtype=dtype).element_size()
    padded = _randn((n_rows, -(-n // vec) * vec), dtype)
    x = padded[:, :n]
    x[0, : n // 2] = float("-inf")
    if n_rows > 2:
        x[1] = float("-inf")
        x[2] = -1000.0 - torch.rand(n, device="cuda")
    rows = [r for r in range(n_rows) if r != 1 or n_rows <= 2]
    return padded, x, rows[:keep] + rows[-keep:]


def _check_poisoned(launch, x, rows, padded_out, **knobs):
    """launch(x, out=y) on a NaN-poisoned y (``padded_out``: a view with padded rows, whose padding must stay
    NaN); the rows right, the all -inf row NaN."""
    n_rows, n = x.shape
    wide = torch.full((n_rows, n + 64), float("nan"), dtype=x.dtype, device="cuda")
    y = wide[:, :n] if padded_out else torch.full_like(x, float("nan"))
    launch(x, out=y, **knobs)
    _check_rows(y, x, rows)
    if n_rows > 2:
        assert torch.isnan(y[1]).all()
    assert torch.isnan(wide[:, n:]).all()  # the padding is left alone


@pytest.mark.parametrize("shape", [(2048, 32768), (1, 20000), (7, 16385), (300, 32767), (133, 24576), (5, 65536),
                                   (4096, 16384), (9, 8193), (3, 100)])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("kernel", ["staged", "resident"])
def test_gluon_kernels_at_gpu_sizes(kernel, shape, dtype):
    # The Gluon kernels (kernels/staged.py, kernels/resident.py): rows in shared memory; tails of every length,
    # long -inf runs, a fully -inf row (NaN, like torch), all-negative rows, every knob, in place, on
    # poisoned outputs.
    from softmax_lab.kernels import GPU_ONLY
    from softmax_lab.kernels._launch import shared_memory_cols
    from softmax_lab.kernels.resident import shared_row

    launch = GPU_ONLY[kernel]
    n_rows, n = shape
    if n > shared_memory_cols(dtype):
        with pytest.raises(ValueError, match="supports rows of up to"):
            launch(_randn(shape, dtype))
        return
    padded, x, rows = _hard_rows(n_rows, n, dtype, 64)
    if kernel == "staged":
        two_fit = 2 * triton.next_power_of_2(n) * x.element_size() <= 227 * 1024
        knob_sets = (dict(), dict(STAGES=1), dict(STAGES=2 if two_fit else 1, programs=7), dict(num_warps=16))
    else:
        knob_sets = (dict(), dict(num_warps=4), dict(num_warps=16), dict(num_warps=32), dict(overlap=True),
                     dict(overlap=True, num_warps=16), dict(overlap=True, online=True),
                     dict(overlap=True, online=True, num_warps=4), dict(overlap=True, online=True, num_warps=16))
    for i, knobs in enumerate(knob_sets):
        block, chunk = shared_row(n, x.element_size(), knobs.get("num_warps"))
        if knobs.get("online") and block // chunk > 32:  # (the sum with the max: 32 chunks at most, resident.py)
            with pytest.raises(ValueError, match="at most 32 chunks"):
                launch(x, **knobs)
            continue
        _check_poisoned(launch, x, rows, padded_out=i % 2, **knobs)
    z = padded.clone()[:, :n]
    launch(z, out=z)  # in place
    _check_rows(z, x, rows)


@HOPPER
def test_gluon_dispatch_and_its_fallback(monkeypatch):
    # 16-bit rows of 8193-32768 take the resident kernel (watched: a spy counts its launches); rows that do not
    # start on 16 bytes, or whose last vector would pass the end of x, fall back to the cooperative kernel
    # (fused from 8193 to 16384: below), with the same results and a relaunch plan; the launchers refuse them.
    from softmax_lab import dispatch
    from softmax_lab.kernels import resident_softmax, staged_softmax

    assert softmax.choose(2048, 32768, BF16)[0] == "resident"
    assert softmax.choose(4096, 16384, torch.float16)[0] == "resident"
    assert softmax.choose(4096, 8192, torch.float16)[0] == "fused"
    assert softmax.choose(2048, 32768, torch.float32)[0] == "fused"
    assert softmax.choose(2048, 20000, torch.float32)[0] == "resident"  # fp32 rows of 16385-28672
    f32 = _randn((64, 20008))
    for x, kernel in ((f32[:, :20000], "resident"), (f32[:, 1:20001], "unaligned")):  # misaligned: unaligned.py
        assert dispatch._runnable(x)[0] == kernel and dispatch.plan_2d(x) is not None
        _check_rows(softmax(x), x, slice(None))
    calls = []
    monkeypatch.setitem(dispatch.LAUNCHERS, "resident", lambda x, **k: calls.append(1) or resident_softmax(x, **k))
    n = 20000
    big = _randn((64, n + 8), BF16)
    for x, resident in ((big[:, :n], True), (big[:, 1:], False), (big[:, 1:n + 1], False),
                        (_randn((1, n + 1), BF16), False)):
        before = len(calls)
        _check_rows(dispatch.softmax_2d(x), x, slice(None))  # (softmax() itself goes through the plan)
        assert (len(calls) > before) == resident, x.shape
        _check_rows(softmax(x), x, slice(None))
    for launch in (resident_softmax, staged_softmax):
        with pytest.raises(ValueError, match="16-byte"):
            launch(big[:, 1:n + 1])
    with pytest.raises(ValueError, match="shared memory"):
        staged_softmax(_randn((2, 32768)), STAGES=2)  # 2 x 128 KB
    odd = _randn((16, 10001), BF16)  # rows of 10001 elements: not whole vectors, so their window in shared memory
    assert dispatch._runnable(odd)[0] == "unaligned_resident" and dispatch.plan_2d(odd) is not None
    _check_rows(softmax(odd), odd, slice(None))
    view = _randn((16, 10010), BF16)[:, 1:10002]  # a view one element in: a new output lies otherwise, so fused
    assert dispatch._runnable(view)[0] == "fused" and dispatch.plan_2d(view) is not None
    _check_rows(softmax(view), view, slice(None))


def test_gluon_more_than_2_31_elements():
    n_rows = (1 << 16) + 1  # 65537 rows of 32768 bf16 = 2.15e9 elements: row * stride passes 2**31
    x = torch.empty((n_rows, 32768), dtype=BF16, device="cuda")
    x.normal_(0, 3)
    rows = torch.tensor([0, 1, n_rows // 2, n_rows - 2, n_rows - 1], device="cuda")
    _check_rows(softmax(x), x, rows)  # resident
    from softmax_lab.kernels import staged_softmax

    _check_rows(staged_softmax(x), x, rows)


CLUSTERED_KNOBS = (dict(), dict(parts=4, num_warps=4, vectors=2), dict(parts=8, num_warps=2, vectors=2),
                   dict(parts=16, num_warps=4, vectors=1), dict(parts=2, num_warps=8), dict(parts=1),
                   dict(parts=16, num_warps=8, vectors=2), dict(parts=16, num_warps=4, vectors=4),
                   dict(dsmem=True), dict(parts=4, num_warps=4, vectors=2, dsmem=True),
                   dict(parts=16, num_warps=4, vectors=1, dsmem=True), dict(parts=1, dsmem=True),
                   dict(online=True), dict(parts=4, num_warps=4, vectors=2, online=True),
                   dict(parts=8, num_warps=2, vectors=2, online=True, dsmem=True), dict(parts=1, online=True),
                   dict(parts=16, num_warps=4, vectors=1, online=True))


@HOPPER
@pytest.mark.parametrize("shape", [(1024, 65536), (3, 131072), (17, 100001), (300, 65537), (5, 40000), (9, 100),
                                   (2, 524288), (4, 1048576)])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_clustered_kernel_at_gpu_sizes(shape, dtype):
    # kernels/clustered.py: a row over a cluster of programs; slices of -inf only (their sum is 0), a fully -inf
    # row (NaN, like torch), all-negative rows, rows of any length (slices sized to the row), every knob that
    # fits, in place, on poisoned outputs; rows past 16 shared memories are refused.
    from softmax_lab.kernels import clustered_softmax
    from softmax_lab.kernels.clustered import slices

    n_rows, n = shape
    if n > 16 * shared_memory_cols(dtype):
        with pytest.raises(ValueError, match="supports rows of up to"):
            clustered_softmax(_randn(shape, dtype))
        return
    padded, x, rows = _hard_rows(n_rows, n, dtype, 32)
    ran = 0
    for knobs in CLUSTERED_KNOBS:
        try:
            sizes = {k: v for k, v in knobs.items() if k not in ("dsmem", "online")}  # (nor do these the slices)
            slice_bytes = slices(n, x.element_size(), **sizes)["SLICE"] * x.element_size()
        except ValueError as err:  # knobs this row cannot take are refused, with the reason
            with pytest.raises(ValueError, match=str(err)[:20]):
                clustered_softmax(x, **knobs)
            continue
        if slice_bytes > 227 * 1024:
            with pytest.raises(ValueError, match="shared memory"):
                clustered_softmax(x, **knobs)
            continue
        _check_poisoned(clustered_softmax, x, rows, padded_out=ran % 2, **knobs)
        ran, fits = ran + 1, knobs
    assert ran >= 2
    fits = {k: v for k, v in fits.items() if k not in ("dsmem", "online")}  # (the slices of a setting that ran)
    for dsmem in (False, True):
        for online in (False, True):
            z = padded.clone()[:, :n]
            clustered_softmax(z, out=z, dsmem=dsmem, online=online, **fits)  # in place
            _check_rows(z, x, rows)


def _spread_rows(n_rows, n, dtype):
    """Rows of values near -1000 whose mass sits on 5 elements far apart (other threads, other programs of a
    cluster): where each thread's, or each program's, rounding of its max·log2 e shows (chunk_state.py); row 0 has
    a +inf and row 1 a NaN (their rows NaN, like torch)."""
    x = -1000.0 - 3 * torch.rand((n_rows, n), device="cuda")
    for k in range(5):
        x[:, k * (n // 5) + 7] = -990.0 + torch.rand(n_rows, device="cuda")
    x[0, n // 3] = float("inf")
    x[1, n // 2] = float("nan")
    return x.to(dtype)


ONLINE_CASES = [("resident", (64, 20000), dict(overlap=True, online=True)),
                ("resident", (64, 16384), dict(overlap=True, online=True, num_warps=4)),
                ("unaligned_resident", (64, 20001), dict(online=True, num_warps=16, line=128)),
                ("unaligned_resident", (64, 20001), dict(online=True, num_warps=8)),
                ("unaligned_resident", (64, 1501), dict(online=True, num_warps=1)),
                ("clustered", (64, 65536), dict(online=True)),
                ("clustered", (64, 65536), dict(online=True, dsmem=True)),
                ("clustered", (16, 151936), dict(online=True, parts=16, num_warps=4)),
                ("clustered", (16, 128256), dict(online=True, parts=8, num_warps=2, dsmem=True)),
                ("resident", (64, 20000), dict(overlap=True)), ("unaligned_resident", (64, 20001), dict()),
                ("clustered_tma", (64, 65536), dict(parts=8, num_warps=8)),
                ("clustered_tma", (64, 81920), dict(parts=8, num_warps=4)),
                ("clustered_tma", (16, 100000), dict(parts=16, num_warps=4)),
                ("clustered_tma", (16, 151936), dict(parts=8, num_warps=8)),
                ("clustered_tma", (16, 128256), dict(parts=8, num_warps=4, stream=True)),
                ("clustered_tma", (16, 151936), dict(parts=16, num_warps=4, stream=True))]


@HOPPER
@pytest.mark.parametrize("kernel, shape, knobs", ONLINE_CASES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_online_sum_rounding_and_nan_rows(kernel, shape, knobs, dtype):
    # The sum taken with the max (chunk_state.py), and the passes beside it: as close to a float64 softmax as
    # the dtype allows on rows whose first form came out 1.4e-5 off in fp32 (each thread rounded its own shift);
    # a row with +inf or NaN gives NaN, like torch.
    from softmax_lab.kernels import (clustered_softmax, clustered_tma_softmax, resident_softmax,
                                     unaligned_resident_softmax)

    launch = {"resident": resident_softmax, "unaligned_resident": unaligned_resident_softmax,
              "clustered": clustered_softmax, "clustered_tma": clustered_tma_softmax}[kernel]
    x = _spread_rows(*shape, dtype)
    y = launch(x, out=torch.full_like(x, float("nan")), **knobs)
    atol, rtol = tolerance(dtype)
    torch.testing.assert_close(y.double(), torch.softmax(x.double(), -1), atol=atol, rtol=rtol, equal_nan=True)
    assert torch.isnan(y[:2]).all() and not torch.isnan(y[2:]).any()


@HOPPER
@pytest.mark.parametrize("dsmem", (False, True))
def test_clustered_passes_on_spread_rows_near_minus_1000(dsmem):
    # The passes' maxes are exchanged times log2 e (clustered.py): each program rounding its own m·log2 e and the
    # partials moved by exp2((m_p - m_row)·log2 e) came out 2.6e-5 to 4.6e-5 off in a NumPy model of fp32.
    from softmax_lab.kernels import clustered_softmax

    x = _spread_rows(64, 65536, torch.float32)
    y = clustered_softmax(x, out=torch.full_like(x, float("nan")), dsmem=dsmem)
    atol, rtol = tolerance(torch.float32)
    torch.testing.assert_close(y.double(), torch.softmax(x.double(), -1), atol=atol, rtol=rtol, equal_nan=True)


@HOPPER
def test_clustered_dispatch_plans_and_fallback(monkeypatch):
    # The clustered kernel through softmax() and through its relaunch plan (the second call of a kind), with the
    # rule it had until round 13 for 16-bit rows of 81,921-131,072 (clustered_tma takes every range it had now);
    # the resident kernel's plan too; misaligned rows fall back to cooperative.
    from softmax_lab import dispatch, op
    from softmax_lab.kernels import clustered_softmax

    rules = [(limit, ("clustered", dict(parts=8, num_warps=2, vectors=1, online=True)) if limit == 131072 else rule)
             for limit, rule in dispatch.FORWARD[2]]
    monkeypatch.setitem(dispatch.FORWARD, 2, rules)
    assert softmax.choose(1024, 81921, BF16)[0] == "clustered"
    assert softmax.choose(1024, 131072, torch.float16)[0] == "clustered"
    assert softmax.choose(1024, 131073, BF16)[0] == "clustered_tma"  # (streamed, since round 14)
    calls = []
    monkeypatch.setitem(dispatch.LAUNCHERS, "clustered", lambda x, **k: calls.append(1) or clustered_softmax(x, **k))
    for shape, dtype, name in (((64, 131072), torch.float16, "clustered"), ((33, 100000), BF16, "clustered"),
                               ((8, 32768), BF16, "resident")):
        x, x2 = _randn(shape, dtype), _randn(shape, dtype)
        before = len(calls)
        _check_rows(dispatch.softmax_2d(x), x, slice(None))
        assert len(calls) - before == (name == "clustered"), shape
        assert dispatch.plan_2d(x) is not None, shape
        op._PLANS.clear()
        _check_rows(softmax(x), x, slice(None))  # the plan, made
        _check_rows(softmax(x2), x2, slice(None))  # the plan, again
        assert len(op._PLANS) == 1
    big = _randn((4, 65536 + 8))
    before = len(calls)
    _check_rows(softmax(big[:, 1:65537]), big[:, 1:65537], slice(None))  # rows 4 bytes in: cooperative
    assert dispatch._runnable(big[:, 1:65537])[0] == "cooperative"  # (fp32 rows that long keep it: dispatch.py)
    assert len(calls) == before
    assert dispatch.plan_2d(big[:, 1:65537]) is not None  # (a plan of the cooperative kernel)
    with pytest.raises(ValueError, match="16-byte"):
        clustered_softmax(big[:, 1:65537])


@HOPPER
def test_clustered_more_than_2_31_elements():
    n_rows = (1 << 15) + 1  # 32769 rows of 65536 bf16 = 2.15e9 elements
    x = torch.empty((n_rows, 65536), dtype=BF16, device="cuda")
    x.normal_(0, 3)
    rows = torch.tensor([0, 1, n_rows // 2, n_rows - 2, n_rows - 1], device="cuda")
    _check_rows(softmax(x), x, rows)  # clustered_tma (since round 13)
    from softmax_lab.kernels import clustered_softmax

    _check_rows(clustered_softmax(x, online=True), x, rows)


TMA_KNOBS = (dict(), dict(parts=8, num_warps=8), dict(parts=16, num_warps=4), dict(parts=4, num_warps=8),
             dict(parts=2, num_warps=16), dict(parts=16, num_warps=8), dict(parts=1),
             dict(parts=8, num_warps=4, stream=True), dict(parts=4, num_warps=4, stream=True),
             dict(parts=16, num_warps=4, stream=True), dict(parts=2, num_warps=8, stream=True),
             dict(parts=8, num_warps=1, stream=True), dict(parts=8, num_warps=8, stream=True),
             dict(parts=16, num_warps=8, stream=True))


@HOPPER
@pytest.mark.parametrize("shape", [(1024, 65536), (3, 131072), (17, 100000), (300, 65544), (5, 40000), (9, 1000),
                                   (2, 151936), (7, 49152), (5, 81920), (4, 163840), (3, 8), (2, 262144)])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_clustered_tma_kernel_at_gpu_sizes(shape, dtype):
    # kernels/clustered_tma.py: each slice copied by TMA, held in registers or streamed; slices past the row's end and
    # programs wholly past it (1000 and 8 over 8 or 16 programs), slices of -inf only, a fully -inf row (NaN,
    # like torch), all-negative rows, every knob that fits (those that do not are refused, saying why), in place,
    # on poisoned outputs.
    from softmax_lab.kernels import clustered_tma_softmax
    from softmax_lab.kernels.clustered_tma import refusal

    n_rows, n = shape
    padded, x, rows = _hard_rows(n_rows, n, dtype, 32)
    ran = 0
    for knobs in TMA_KNOBS:
        why = refusal(x, **knobs)
        assert not (knobs.get("stream") and "registers" in why), why  # (streamed: registers never refuse it)
        if why:
            with pytest.raises(ValueError, match=re.escape(why[:40])):
                clustered_tma_softmax(x, **knobs)
            continue
        _check_poisoned(clustered_tma_softmax, x, rows, padded_out=ran % 2, **knobs)
        ran, fits = ran + 1, knobs
    assert ran >= 2
    z = padded.clone()[:, :n]
    clustered_tma_softmax(z, out=z, **fits)  # in place
    _check_rows(z, x, rows)


@HOPPER
@pytest.mark.parametrize("n_cols, dtype, knobs", [(65536, BF16, dict(parts=4, num_warps=4, stream=True)),
                                                  (128256, BF16, dict(parts=8, num_warps=4, stream=True)),
                                                  (151936, torch.float32, dict(parts=16, num_warps=4, stream=True)),
                                                  (163840, BF16, dict(parts=8, num_warps=8, stream=True)),
                                                  (200000, torch.float32, dict(parts=16, num_warps=8, stream=True)),
                                                  (65536, BF16, dict(parts=8, num_warps=4))], ids=str)
def test_clustered_tma_every_row_of_many_inputs(n_cols, dtype, knobs):
    # Round 14's race: the TMA copies' mbarrier, once waited on, was not invalidated, and program 0's reduction
    # scratch lay on its bytes; now and then the barrier's state overwrote program 0's max or sum (0.3-0.6% of
    # rows wrong on the streamed form: 4-20 rows in each input of 1024). Every row of 8 fresh inputs, checked.
    from softmax_lab.kernels import clustered_tma_softmax

    rows = 1024 if dtype != torch.float32 else 512
    for _ in range(8):
        x = (3 * torch.randn(rows, n_cols, device="cuda")).to(dtype)
        y = torch.full_like(x, float("nan"))
        clustered_tma_softmax(x, out=y, **knobs)
        _check_rows(y, x, slice(None))


@HOPPER
def test_clustered_tma_dispatch_plans_and_fallback(monkeypatch):
    # rows of 49152-262144 fp32 and 57345-262144 16-bit take clustered_tma (rounds 13-14), through softmax()
    # and through its relaunch plan, which moves x's TMA descriptors to each call's x (new inputs, the same plan);
    # rows off 16 bytes, or not whole vectors, are refused by the launcher and fall back.
    from softmax_lab import dispatch, op
    from softmax_lab.kernels import clustered_tma_softmax

    for n, dtype in ((49152, torch.float32), (65536, torch.float32), (65537 + 3, torch.float32),
                     (131072, torch.float32), (163840, torch.float32), (57345 + 7, BF16), (81920, torch.float16),
                     (100000, BF16), (131072, BF16), (163840, BF16), (262144, torch.float16), (200000, torch.float32),
                     (262144, torch.float32)):
        assert softmax.choose(64, n, dtype)[0] == "clustered_tma", (n, dtype)
    assert softmax.choose(64, 262145, BF16)[0] == "cooperative"
    assert softmax.choose(64, 49151, torch.float32)[0] == "cooperative"
    assert softmax.choose(64, 262145, torch.float32)[0] == "cooperative"
    assert softmax.choose(64, 57344, BF16)[0] == "resident"
    calls = []
    monkeypatch.setitem(dispatch.LAUNCHERS, "clustered_tma",
                        lambda x, **k: calls.append(1) or clustered_tma_softmax(x, **k))
    for shape, dtype in (((64, 65536), torch.float32), ((33, 100000), torch.float32), ((20, 151936), torch.float32),
                         ((40, 70000), BF16), ((3, 65536), torch.float16), ((9, 128256), BF16),
                         ((5, 200000), BF16), ((6, 250000), torch.float32)):  # (held and streamed, clusters of 4,
        # 8 and 16)
        xs = [_randn(shape, dtype) for _ in range(3)]
        before = len(calls)
        _check_rows(dispatch.softmax_2d(xs[0]), xs[0], slice(None))
        assert len(calls) - before == 1, shape
        assert dispatch.plan_2d(xs[0]) is not None, shape
        op._PLANS.clear()
        for x in xs:  # the plan, made, then again on new tensors (new addresses for its descriptors)
            y = softmax(x)
            _check_rows(y, x, slice(None))
        assert len(op._PLANS) == 1
        x = xs[1]
        graph, out = torch.cuda.CUDAGraph(), None
        with torch.cuda.graph(graph):  # (the descriptors are kernel parameters: a graph keeps them)
            out = softmax(x)
        x.copy_(xs[2])
        graph.replay()
        _check_rows(out, xs[2], slice(None))
    big = _randn((4, 65536 + 8))
    before = len(calls)
    _check_rows(softmax(big[:, 1:65537]), big[:, 1:65537], slice(None))  # rows 4 bytes in: not TMA's
    assert dispatch._runnable(big[:, 1:65537])[0] != "clustered_tma" and len(calls) == before
    for bad in (big[:, 1:65537], _randn((3, 65538))[:, :65535]):
        with pytest.raises(ValueError, match="TMA|16-byte"):
            clustered_tma_softmax(bad)
    with pytest.raises(ValueError, match="at most 128"):
        clustered_tma_softmax(_randn((2, 65536)), parts=2, num_warps=4)


# Rows that do not start on 16 bytes (kernels/unaligned.py): odd widths, odd strides, an odd first element.
UNALIGNED_SHAPES = [(100000, 77), (65536, 130), (2048, 50257), (300, 4097), (5, 1), (7, 3), (33, 16383), (3, 65539),
                    (2, 262147), (1000, 1001)]


def _unaligned_inputs(shape, dtype):
    """Contiguous rows, a view one element in (rows start mid-vector differently than the output's), a view whose
    row stride is odd, and rows whose first element is off 16 bytes but whose stride is whole vectors."""
    n_rows, n = shape
    yield "contiguous", _randn(shape, dtype)
    yield "one in", _randn((n_rows, n + 8), dtype)[:, 1:n + 1]
    yield "odd stride", _randn((n_rows, n + 3), dtype)[:, :n]
    vec = 16 // torch.empty((), dtype=dtype).element_size()
    yield "offset", _randn((n_rows, -(-n // vec) * vec + vec), dtype)[:, 1:n + 1]


@pytest.mark.parametrize("shape", UNALIGNED_SHAPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_unaligned_rows_forward_and_backward(shape, dtype):
    from softmax_lab import dispatch
    from softmax_lab.kernels.unaligned import takes, unaligned_cooperative_softmax, unaligned_softmax

    n_rows, n = shape
    rows = sorted({0, 1 % n_rows, n_rows // 2, n_rows - 1})
    for what, x in _unaligned_inputs(shape, dtype):
        if n > 1:  # a -inf inside a row, and a row of -inf then one finite value (a row of one -inf is NaN)
            x[rows[-1], n // 3] = float("-inf")
            x[rows[0], :] = float("-inf")
            x[rows[0], n - 1] = 1.0
        name = dispatch._runnable(x)[0]
        if not takes(x) or dispatch.choose_unaligned(n, dtype) is None:
            assert not name.startswith("unaligned"), what
        poisoned = torch.full(shape, float("nan"), dtype=dtype, device="cuda")
        launchers = [softmax, lambda x: dispatch.softmax_2d(x), lambda x: unaligned_cooperative_softmax(
            x, out=poisoned, BLOCK=4096)]
        if n + 7 <= 65536:
            launchers.append(lambda x: unaligned_softmax(x, out=poisoned.fill_(float("nan"))))
        for launch in launchers:
            y = launch(x)
            assert not y.isnan().any(), (what, name)
            _check_rows(y, x, rows)
        y = softmax(x)
        dy = _randn(shape, dtype)
        for out in (None, torch.full(shape, float("nan"), dtype=dtype, device="cuda")):
            dx = softmax_backward(y, dy, out=out)
            want = softmax_backward_ref(y[rows].double(), dy[rows].double())
            atol, rtol = tolerance(dtype)
            torch.testing.assert_close(dx[rows].double(), want, atol=10 * atol, rtol=rtol)
            assert not dx.isnan().any()
        yv = torch.empty((n_rows, n + 8), dtype=dtype, device="cuda")[:, 1:n + 1].copy_(y)  # y, dy lie differently
        dx = softmax_backward(yv, dy)
        torch.testing.assert_close(dx[rows].double(), softmax_backward_ref(y[rows].double(), dy[rows].double()),
                                   atol=10 * tolerance(dtype)[0], rtol=tolerance(dtype)[1])


def test_unaligned_plans_match_the_launchers():
    from softmax_lab import dispatch, op

    for x, kernel in ((_randn((4096, 9)), "unaligned"), (_randn((512, 3001)), "unaligned"),
                      (_randn((64, 1003))[:, 1:1002], "unaligned"), (_randn((64, 1008))[:, 1:1001], "unaligned"),
                      (_randn((4096, 77)), "multirow"), (_randn((512, 4099)), "multirow"),  # (the tail tiles)
                      (_randn((64, 140))[:, 1:131], "multirow")):
        name, knobs = dispatch._runnable(x)
        assert name == kernel and dispatch.plan_2d(x) is not None, (x.shape, name)
        op._PLANS.clear()
        want = dispatch.LAUNCHERS[name](x, **knobs)
        for _ in range(3):
            torch.testing.assert_close(softmax(x), want, atol=0, rtol=0)


def test_unaligned_more_than_2_31_elements():
    n_rows = (1 << 15) + 1  # 32769 rows of 65537 fp16 = 2.15e9 elements
    x = torch.empty((n_rows, 65537), dtype=torch.float16, device="cuda")
    x.normal_(0, 3)
    rows = torch.tensor([0, 1, n_rows // 2, n_rows - 2, n_rows - 1], device="cuda")
    from softmax_lab import dispatch

    assert dispatch._runnable(x)[0] == "unaligned_cooperative"
    y = softmax(x)
    _check_rows(y, x, rows)
    dx = softmax_backward(y, y)
    torch.testing.assert_close(dx[rows].double(), softmax_backward_ref(y[rows].double(), y[rows].double()),
                               atol=1e-2, rtol=1e-2)
    del x, y, dx
    x = torch.empty((65537, 32771), dtype=torch.float16, device="cuda")  # a tile row past 2**31 elements
    x.normal_(0, 3)
    rows = torch.tensor([0, 1, 65535, 65536], device="cuda")
    from softmax_lab.kernels.unaligned import unaligned_softmax

    _check_rows(unaligned_softmax(x[:, :4095]), x[:, :4095], rows)


def _size(dtype):
    return torch.empty((), dtype=dtype).element_size()


# 16-bit rows that do not start on 16 bytes, their window in shared memory (kernels/unaligned_resident.py).
@HOPPER
@pytest.mark.parametrize("shape", [(2048, 50257), (33, 16383), (7, 40001), (3, 57337), (1, 16385), (64, 30003),
                                   (5, 9)], ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_unaligned_resident_at_gpu_sizes(shape, dtype):
    # Poisoned outputs, a -inf run, a row of -inf but one, an all -inf row (NaN, like torch), all-negative rows;
    # contiguous rows and a view whose rows start one element in with an output that lies alike; in place;
    # every knob that fits; the refusals say what to use instead.
    from softmax_lab import dispatch
    from softmax_lab.kernels.unaligned_resident import refusal, unaligned_resident_softmax

    n_rows, n = shape
    wide = _randn((n_rows, n + 9), dtype)
    for what, x, out in (("contiguous", _randn(shape, dtype), torch.full(shape, float("nan"), dtype=dtype,
                                                                          device="cuda")),
                         ("one in", wide[:, 1:n + 1], torch.full((n_rows, n + 9), float("nan"), dtype=dtype,
                                                                 device="cuda")[:, 1:n + 1]),
                         # an output alike around 16-byte vectors, not around 128-byte lines (16 bytes further in)
                         ("lines apart", wide[:, 1:n + 1], torch.full((n_rows, n + 9 + 16 // _size(dtype)),
                                                                      float("nan"), dtype=dtype, device="cuda")
                          [:, 1 + 16 // _size(dtype):n + 1 + 16 // _size(dtype)])):
        rows = sorted({0, 1 % n_rows, 2 % n_rows, n_rows // 2, n_rows - 1})
        if n > 1 and n_rows > 3:
            x[0, : n // 3] = float("-inf")
            x[1] = float("-inf")
            x[2] = -1000.0 - torch.rand(n, device="cuda")
            x[n_rows - 1, :] = float("-inf")
            x[n_rows - 1, n - 1] = 2.0
        keep = [r for r in rows if n_rows <= 3 or r != 1]
        for warps, line, online in ((8, 16, False), (16, 16, False), (32, 16, False), (8, 128, False),
                                    (16, 128, False), (8, 128, True), (16, 128, True), (32, 16, True)):
            why = refusal(x, out, warps, line)  # (line: where windows start; online: chunk_state.py)
            if why:  # (fp32 rows of 50,257 at 8 warps: 50 chunks; of 57,337: more than shared memory holds)
                assert "chunks" in why or "shared memory" in why, (what, warps, why)
                continue
            y = unaligned_resident_softmax(x, out=out.fill_(float("nan")), num_warps=warps, line=line, online=online)
            assert y.data_ptr() == out.data_ptr()
            _check_rows(y, x, keep)
            if n_rows > 3:
                assert torch.isnan(y[1]).all()
                assert not torch.isnan(y[keep]).any()
        if what != "contiguous":  # the poisoned padding around the rows is left alone
            lead, stride = out.storage_offset(), out.stride(0)
            base = out.as_strided((n_rows, stride), (stride, 1), 0)
            assert torch.isnan(base[:, :lead]).all() and torch.isnan(base[:, lead + n:]).all()
    x = _randn(shape, dtype)  # (contiguous: the views above never take a new output)
    fits = [w for w in (8, 16, 32) if not refusal(x, None, w)]
    if fits:
        z = x.clone()
        unaligned_resident_softmax(z, out=z, num_warps=fits[0])  # in place
        _check_rows(z, x, keep)
    vec = 16 // x.element_size()
    if (1031 if vec == 8 else 16384) < n + vec - 1 <= 57344:  # the dispatcher takes it for contiguous rows, planned
        c = _randn(shape, dtype)
        name, knobs = dispatch._runnable(c)
        assert name == "unaligned_resident" and dispatch.plan_2d(c) is not None
        want = unaligned_resident_softmax(c, **knobs)
        for _ in range(3):
            torch.testing.assert_close(softmax(c), want, atol=0, rtol=0)
        assert dispatch._runnable(wide[:, 1:n + 1])[0] != "unaligned_resident"  # a new output lies otherwise
    if fits:
        with pytest.raises(ValueError, match="lie like the input"):
            unaligned_resident_softmax(wide[:, 1:n + 1], num_warps=fits[0])


@HOPPER
def test_unaligned_resident_more_than_2_31_elements():
    n_rows = 42800  # rows of 50,257 fp16: 2.15e9 elements, row * stride past 2**31
    x = torch.empty((n_rows, 50257), dtype=torch.float16, device="cuda")
    x.normal_(0, 3)
    from softmax_lab import dispatch

    assert dispatch._runnable(x)[0] == "unaligned_resident"
    rows = torch.tensor([0, 1, n_rows // 2, n_rows - 2, n_rows - 1], device="cuda")
    _check_rows(softmax(x), x, rows)


# The backward whose y and dy wait in shared memory, persistent programs (kernels/resident_backward.py).
@HOPPER
@pytest.mark.parametrize("shape", [(2048, 50257), (300, 20000), (33, 16385), (7, 40001), (3, 57337), (1, 28669),
                                   (131, 32768), (5, 9)], ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_resident_backward_at_gpu_sizes(shape, dtype):
    # Poisoned outputs; contiguous rows and views one element in (y, dy, dx lying alike); NaN and inf in the
    # neighbours' elements that share the row's first and last vectors (copied, never used); fewer rows than
    # programs and more; every knob that fits; in place; the refusals say what to use instead.
    from softmax_lab.kernels.backward import resident_knobs
    from softmax_lab.kernels.resident_backward import refusal, resident_backward

    n_rows, n = shape
    atol, rtol = tolerance(dtype)
    pad = 9
    wide_y = torch.softmax(_randn((n_rows, n + pad)), -1).to(dtype)
    wide_dy = _randn((n_rows, n + pad), dtype)
    wide_y[:, 0], wide_dy[:, 0], wide_dy[:, n + 1] = float("nan"), float("inf"), float("nan")
    for what, y, dy, out in (
            ("contiguous", torch.softmax(_randn(shape), -1).to(dtype), _randn(shape, dtype),
             torch.full(shape, float("nan"), dtype=dtype, device="cuda")),
            ("one in", wide_y[:, 1:n + 1], wide_dy[:, 1:n + 1],
             torch.full((n_rows, n + pad), float("nan"), dtype=dtype, device="cuda")[:, 1:n + 1])):
        want = softmax_backward_ref(y, dy)
        ran = 0
        for warps in (4, 8, 16, 32):
            for line in (16, 128):  # (windows from each row's vector, or from its 128-byte line)
                why = refusal(y, dy, out, warps, line)
                if why:
                    assert "chunks" in why or "shared memory" in why, (what, warps, why)
                    continue
                dx = resident_backward(y, dy, out=out.fill_(float("nan")), num_warps=warps, line=line)
                assert dx.data_ptr() == out.data_ptr()
                torch.testing.assert_close(dx.double(), want, atol=atol * 10, rtol=rtol, msg=lambda m: f"{what} "
                                           f"{warps} warps, line {line}: {m}")
                ran += 1
        if what != "contiguous" and ran:  # the poisoned padding around the rows is left alone
            lead, stride = out.storage_offset(), out.stride(0)
            base = out.as_strided((n_rows, stride), (stride, 1), 0)
            assert torch.isnan(base[:, :lead]).all() and torch.isnan(base[:, lead + n:]).all()
        if what == "contiguous" and ran:
            z = dy.clone()
            fits = [w for w in (8, 16, 32) if not refusal(y, z, z, w)]
            resident_backward(y, z, out=z, num_warps=fits[0])  # in place, over dy
            torch.testing.assert_close(z.double(), want, atol=atol * 10, rtol=rtol)
            z = y.clone()
            resident_backward(z, dy, out=z, num_warps=fits[0])  # in place, over y
            torch.testing.assert_close(z.double(), want, atol=atol * 10, rtol=rtol)
            assert "one dtype" in refusal(y, dy.double(), out, fits[0])  # (softmax_backward falls back)
            torch.testing.assert_close(softmax_backward(y, dy.float()).double(), softmax_backward_ref(y, dy.float()),
                                       atol=atol * 10, rtol=rtol)
    # Through softmax_backward and the operator's planned path, where the dispatcher takes it.
    y = torch.softmax(_randn(shape), -1).to(dtype)
    dy = _randn(shape, dtype)
    dx_new = torch.empty_like(y)
    if resident_knobs(y, dy, dx_new):
        assert n > 16384
        from softmax_lab.op import softmax_backward as op_backward
        first = softmax_backward(y, dy)
        torch.testing.assert_close(first.double(), softmax_backward_ref(y, dy), atol=atol * 10, rtol=rtol)
        for _ in range(3):
            torch.testing.assert_close(op_backward(y, dy), first, atol=0, rtol=0)
    else:
        assert n <= 16384 or n > 57337 or (dtype == torch.float32 and (n > 28669 or n % 4 == 0))
    if not refusal(y, dy, dx_new, 16):
        with pytest.raises(ValueError, match="lie alike"):
            resident_backward(wide_y[:, 1:n + 1], wide_dy[:, 1:n + 1], num_warps=16)  # a new dx lies otherwise
        # dy 16 bytes further from a 128-byte line than y: alike around vectors, not lines (dx may lie otherwise)
        v = 16 // y.element_size()
        dy_far = torch.empty(n_rows * n + v, dtype=dtype, device="cuda")[v:].view(n_rows, n).copy_(dy)
        dx_far = torch.empty(n_rows * n + v, dtype=dtype, device="cuda")[v:].view(n_rows, n)
        want = softmax_backward_ref(y, dy)
        got = [resident_backward(y, dy_far, num_warps=16), softmax_backward(y, dy_far)]
        if not refusal(y, dy, dx_new, 16, 128):  # (the line's room fits too)
            assert "128-byte lines" in refusal(y, dy_far, dx_new, 16, 128)
            got.append(resident_backward(y, dy, out=dx_far, num_warps=16, line=128))
        for dx in got:
            torch.testing.assert_close(dx.double(), want, atol=atol * 10, rtol=rtol)


def _backward_case(shape, dtype):
    """The clustered backwards' inputs: y (softmax rows, row 0 one-hot), dy, and float64's dx."""
    y = torch.softmax(_randn(shape), -1).to(dtype)
    y[0] = 0
    y[0, shape[1] // 2] = 1  # a one-hot row
    dy = _randn(shape, dtype)
    return y, dy, softmax_backward_ref(y, dy)


def _check_in_place(run, y, dy, want, atol, rtol):
    """``run(y, dy, out)`` with out dy itself, then y itself: dx as float64's."""
    for over in ("dy", "y"):
        z = (dy if over == "dy" else y).clone()
        dx = run(z if over == "y" else y, z if over == "dy" else dy, z)
        torch.testing.assert_close(dx.double(), want, atol=atol * 10, rtol=rtol)


@HOPPER
@pytest.mark.parametrize("shape", [(64, 128256), (33, 151936), (5, 65536), (3, 8), (2, 524288)])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_clustered_backward_at_gpu_sizes(shape, dtype):
    # kernels/clustered_backward.py: poisoned outputs, every knob that fits, both exchanges, in place over dy and
    # over y, out beside dy in one buffer; the refusals say what to use instead.
    from softmax_lab.kernels.clustered_backward import backward_slices, clustered_backward

    n_rows, n = shape
    atol, rtol = tolerance(dtype)
    y, dy, want = _backward_case(shape, dtype)
    ran = 0
    for knobs in (dict(), dict(parts=4, num_warps=8), dict(parts=8, num_warps=4), dict(parts=16, num_warps=4),
                  dict(parts=16, num_warps=8, vectors=2), dict(parts=1)):
        for dsmem in (False, True):
            try:
                o = backward_slices(n, y.element_size(), **knobs)
            except ValueError as err:
                with pytest.raises(ValueError, match=str(err)[:20]):
                    clustered_backward(y, dy, **knobs, dsmem=dsmem)
                continue
            if 2 * o["SLICE"] * y.element_size() > 227 * 1024:
                with pytest.raises(ValueError, match="shared memory"):
                    clustered_backward(y, dy, **knobs, dsmem=dsmem)
                continue
            out = torch.full(shape, float("nan"), dtype=dtype, device="cuda")
            dx = clustered_backward(y, dy, out=out, **knobs, dsmem=dsmem)
            assert dx.data_ptr() == out.data_ptr()
            torch.testing.assert_close(dx.double(), want, atol=atol * 10, rtol=rtol,
                                       msg=lambda m: f"{knobs} dsmem={dsmem}: {m}")
            ran, fits = ran + 1, knobs
    if 2 * n * y.element_size() > 16 * 227 * 1024:  # (fp32 rows of 524,288: y and dy need 16 programs of 256 KB)
        assert ran == 0
        return
    assert ran >= 2
    _check_in_place(lambda y, dy, out: clustered_backward(y, dy, out=out, **fits, dsmem=True), y, dy, want, atol,
                    rtol)
    both = torch.full((n_rows, 2 * n), float("nan"), dtype=dtype, device="cuda")
    both[:, :n] = dy
    clustered_backward(y, both[:, :n], out=both[:, n:], **fits)  # beside dy in one buffer
    torch.testing.assert_close(both[:, n:].double(), want, atol=atol * 10, rtol=rtol)
    torch.testing.assert_close(both[:, :n], dy)
    with pytest.raises(ValueError, match="one dtype"):
        clustered_backward(y, dy.half() if dtype != torch.float16 else dy.float())
    if n % 16 == 0:
        with pytest.raises(ValueError, match="whole 16-byte vectors"):
            clustered_backward(y[:, 1:], dy[:, 1:], **fits)
        wide = torch.zeros((n_rows, n + 8), dtype=dtype, device="cuda")
        with pytest.raises(ValueError, match="every row of dy must start on a 16-byte boundary"):
            clustered_backward(y, wide[:, 1:n + 1], **fits)


@HOPPER
@pytest.mark.parametrize("shape", [(64, 128256), (33, 151936), (5, 65536), (3, 8), (4, 520), (2, 262144),
                                   (64, 50257), (5, 77), (3, 20001)])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_clustered_tma_backward_at_gpu_sizes(shape, dtype):
    # kernels/clustered_tma_backward.py: poisoned outputs, every knob that fits (slices past the row's end, some
    # wholly: 8, 77 and 520 elements on 4-16 programs), a one-hot row, in place over dy and over y, out beside dy in
    # one buffer; rows that are not whole 16-byte vectors copied as one line (flat descriptors: 50257, 77, 20001);
    # held=True (the columns past MAIN in registers) last, so the in-place and strided checks run it where it
    # applies; the refusals say what to use instead.
    from softmax_lab.kernels.clustered_tma import BOX, tiles
    from softmax_lab.kernels.clustered_tma_backward import clustered_tma_backward

    n_rows, n = shape
    atol, rtol = tolerance(dtype)
    y, dy, want = _backward_case(shape, dtype)
    flat = n % (16 // y.element_size()) != 0
    ran = []
    for knobs in (dict(), dict(parts=2, num_warps=8), dict(parts=4, num_warps=4), dict(parts=8, num_warps=8),
                  dict(parts=16, num_warps=4), dict(parts=16, num_warps=8), dict(parts=8, num_warps=4, held=True),
                  dict(parts=16, num_warps=4, held=True)):
        o = tiles(n, knobs.get("parts", 8), knobs.get("num_warps", 4), BOX if flat else 0)  # (flat: a box more)
        if flat and knobs.get("held"):
            with pytest.raises(ValueError, match="held=True is for rows of whole 16-byte vectors"):
                clustered_tma_backward(y, dy, **knobs)
            continue
        if 2 * (o["MAIN"] + (0 if knobs.get("held") else o["TAIL"])) * y.element_size() > 227 * 1024:
            with pytest.raises(ValueError, match="shared memory"):
                clustered_tma_backward(y, dy, **knobs)
            continue
        out = torch.full(shape, float("nan"), dtype=dtype, device="cuda")
        dx = clustered_tma_backward(y, dy, out=out, **knobs)
        assert dx.data_ptr() == out.data_ptr()
        torch.testing.assert_close(dx.double(), want, atol=atol * 10, rtol=rtol, msg=lambda m: f"{knobs}: {m}")
        ran.append(knobs)
    assert len(ran) >= 2  # (fp32 rows of 262,144: only 16 programs' slices fit)
    fits = ran[-1]
    _check_in_place(lambda y, dy, out: clustered_tma_backward(y, dy, out=out, **fits), y, dy, want, atol, rtol)
    both = torch.full((n_rows, 2 * n), float("nan"), dtype=dtype, device="cuda")
    both[:, :n] = dy
    if flat:  # (one line of elements: dy's and dx's rows must lie one after another)
        with pytest.raises(ValueError, match="dy must start on 16 bytes with its rows one after another"):
            clustered_tma_backward(y, both[:, :n], out=both[:, n:], **fits)
        with pytest.raises(ValueError, match=r"out \(dx\) must start on 16 bytes with its rows one after"):
            clustered_tma_backward(y, dy, out=both[:, n:], **fits)
        with pytest.raises(ValueError, match=r"out \(dx\) must start on 16 bytes"):  # (one element in)
            clustered_tma_backward(y, dy, out=torch.empty(n_rows * n + 1, dtype=dtype, device="cuda")[1:].view(
                n_rows, n), **fits)
    else:
        clustered_tma_backward(y, both[:, :n], out=both[:, n:], **fits)  # beside dy in one buffer
        torch.testing.assert_close(both[:, :n], dy)
        torch.testing.assert_close(both[:, n:].double(), want, atol=atol * 10, rtol=rtol)
        wide_y = torch.full((n_rows, n + 64), float("nan"), dtype=dtype, device="cuda")
        wide_y[:, 64:] = y  # (y's rows 64 elements apart more than their length: the held loads' row stride)
        dx = clustered_tma_backward(wide_y[:, 64:], dy, **fits)
        torch.testing.assert_close(dx.double(), want, atol=atol * 10, rtol=rtol)
    with pytest.raises(ValueError, match="one dtype"):
        clustered_tma_backward(y, dy.half() if dtype != torch.float16 else dy.float())
    with pytest.raises(ValueError, match="parts must be"):
        clustered_tma_backward(y, dy, parts=3)
    if n % 16 == 0:  # (a view one element in: its rows are not whole vectors, nor on 16 bytes)
        with pytest.raises(ValueError, match="held=True is for rows of whole 16-byte vectors"):
            clustered_tma_backward(y[:, 1:], dy[:, 1:], **dict(fits, held=True))
        with pytest.raises(ValueError, match="y must start on 16 bytes"):
            clustered_tma_backward(y[:, 1:], dy[:, 1:], **dict(fits, held=False))
        wide = torch.zeros((n_rows, n + 8), dtype=dtype, device="cuda")
        with pytest.raises(ValueError, match="every row of dy must start on a 16-byte boundary"):
            clustered_tma_backward(y, wide[:, 1:n + 1], **fits)


@HOPPER
@pytest.mark.parametrize("shape, knobs", [((3, 257), dict(parts=2, num_warps=4)),
                                          ((3, 263), dict(parts=2, num_warps=4)),
                                          ((5, 77), dict(parts=4, num_warps=4)),
                                          ((3, 1031), dict(parts=4, num_warps=8)),
                                          ((4, 20001), dict(parts=8, num_warps=4))], ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_flat_tma_backward_stores_only_dx(shape, knobs, dtype):
    # The flat form stores dx's vectors whole and the ones it shares with its neighbours an element at a time
    # (helper-88's review, round 16): dx between NaN guards, a program holding 1 or 7 columns (257 and 263 on 2
    # programs), slices past the row's end; every element right, the guards untouched.
    from softmax_lab.kernels.clustered_tma_backward import clustered_tma_backward

    n_rows, n = shape
    atol, rtol = tolerance(dtype)
    y, dy, want = _backward_case(shape, dtype)
    guard = 64  # (elements: dx stays on 16 bytes)
    buf = torch.full((n_rows * n + 2 * guard,), float("nan"), dtype=dtype, device="cuda")
    dx = clustered_tma_backward(y, dy, out=buf[guard:guard + n_rows * n].view(shape), **knobs)
    torch.testing.assert_close(dx.double(), want, atol=atol * 10, rtol=rtol)
    assert torch.isnan(buf[:guard]).all() and torch.isnan(buf[guard + n_rows * n:]).all()


@HOPPER
@pytest.mark.parametrize("n_cols, dtype, knobs", [(151936, torch.float32, dict(parts=16, num_warps=4)),
                                                  (151936, torch.float32, dict(parts=16, num_warps=4,
                                                                                held=True)),
                                                  (128256, BF16, dict(parts=8, num_warps=4)),
                                                  (65536, torch.float32, dict(parts=8, num_warps=8)),
                                                  (50257, BF16, dict(parts=8, num_warps=4))])
def test_clustered_tma_backward_every_row_of_many_inputs(n_cols, dtype, knobs):
    # The forward's race (round 14: an mbarrier's bytes reused for the reductions' scratch) would show as a wrong
    # row now and then: every row of 6 fresh inputs, checked.
    from softmax_lab.kernels.clustered_tma_backward import clustered_tma_backward

    atol, rtol = tolerance(dtype)
    for _ in range(6):
        y = torch.softmax(_randn((256, n_cols)), -1).to(dtype)
        dy = _randn((256, n_cols), dtype)
        dx = clustered_tma_backward(y, dy, out=torch.full_like(y, float("nan")), **knobs)
        torch.testing.assert_close(dx.double(), softmax_backward_ref(y, dy), atol=atol * 10, rtol=rtol)


@HOPPER
@pytest.mark.parametrize("shape, dtype, knobs", [((64, 128256), BF16, dict(parts=16, num_warps=4)),
                                                 ((16, 151936), torch.float32, dict(parts=16, num_warps=8,
                                                                                    held=True)),
                                                 ((16, 128256), torch.float32, dict(parts=16, num_warps=4)),
                                                 ((8, 131076), torch.float32, dict(parts=16, num_warps=8,
                                                                                   held=True)),
                                                 ((8, 147460), torch.float32, dict(parts=16, num_warps=8,
                                                                                   held=True)),
                                                 ((8, 20000), torch.float32, dict(parts=8, num_warps=4)),
                                                 ((8, 16384), torch.float16, dict(parts=4, num_warps=4)),
                                                 ((8, 65536), torch.float16, dict(parts=8, num_warps=4)),
                                                 ((3, 262144), BF16, dict(parts=16, num_warps=8))])
def test_the_backward_takes_the_tma_kernel_for_long_rows(shape, dtype, knobs, monkeypatch):
    # tuning.TMA_BACKWARD: softmax_backward, and the operator's plan (made on its first call, reused with new y and
    # dy, whose TMA descriptors it moves), on the TMA backward; rows just outside its range keep what they ran
    # before; where it refuses, rows of 65,536-151,936 fall back to the clustered backward (cp.async).
    from softmax_lab import op
    from softmax_lab.kernels import backward, tuning
    from softmax_lab.kernels.backward import clustered_knobs, tma_knobs
    from softmax_lab.kernels.clustered_backward import clustered_backward_kernel
    from softmax_lab.kernels.clustered_tma_backward import clustered_tma_backward_kernel

    y = torch.softmax(_randn(shape), -1).to(dtype)
    dys = [_randn(shape, dtype) for _ in range(3)]
    assert tma_knobs(y, dys[0], y) == knobs
    assert backward.launch_setup(torch.empty_like(y), y, dys[0])[0] is clustered_tma_backward_kernel
    op._BACKWARD_PLANS.clear()
    atol, rtol = tolerance(dtype)
    for run, d in ((softmax_backward, dys[0]), (op.softmax_backward, dys[1]), (op.softmax_backward, dys[2])):
        got = run(y, d)  # the launcher, then the operator's plan, made and reused
        torch.testing.assert_close(got.double(), softmax_backward_ref(y, d), atol=atol * 10, rtol=rtol)
    y2 = torch.softmax(_randn(shape), -1).to(dtype)  # the plan again, with another y
    torch.testing.assert_close(op.softmax_backward(y2, dys[0]).double(), softmax_backward_ref(y2, dys[0]),
                               atol=atol * 10, rtol=rtol)
    vec = 16 // y.element_size()
    low = 16384 if dtype == torch.float32 else 16384 - vec
    for n in (low, (163840 if dtype == torch.float32 else 262144) + vec):
        z = torch.zeros((2, n), dtype=dtype, device="cuda")
        assert tma_knobs(z, z, z) is None, n
    monkeypatch.setitem(tuning.TMA_BACKWARD, y.element_size(), [(None, None)])
    if 65536 <= shape[1] <= 151936:
        assert clustered_knobs(y, dys[0], y) == dict(parts=8, num_warps=4, dsmem=True)
        assert backward.launch_setup(torch.empty_like(y), y, dys[0])[0] is clustered_backward_kernel


@HOPPER
@pytest.mark.parametrize("shape, dtype, knobs", [((8, 20001), torch.float32, dict(parts=4, num_warps=8)),
                                                 ((16, 50257), torch.float32, dict(parts=16, num_warps=4)),
                                                 ((1, 100001), torch.float32, dict(parts=16, num_warps=8)),
                                                 ((3, 128257), torch.float32, dict(parts=16, num_warps=8)),
                                                 ((8, 16385), BF16, dict(parts=2, num_warps=4)),
                                                 ((8, 32001), BF16, dict(parts=4, num_warps=4)),
                                                 ((16, 50257), BF16, dict(parts=8, num_warps=4)),
                                                 ((3, 100001), torch.float16, dict(parts=16, num_warps=4))])
def test_the_flat_tma_backward_through_the_dispatcher(shape, dtype, knobs, monkeypatch):
    # tuning.TMA_BACKWARD_FLAT: softmax_backward and the operator's plan (flat descriptors moved to each call's y
    # and dy) on the flat form, with the knobs of each range; views one element in keep their kernels, and so does
    # every odd row where the table gives no knobs.
    from softmax_lab import op
    from softmax_lab.kernels import backward, tuning
    from softmax_lab.kernels.clustered_tma_backward import clustered_tma_backward_kernel

    size = torch.empty((), dtype=dtype).element_size()
    y = torch.softmax(_randn(shape), -1).to(dtype)
    dys = [_randn(shape, dtype) for _ in range(3)]
    assert backward.tma_knobs(y, dys[0], y) == knobs
    assert backward.launch_setup(torch.empty_like(y), y, dys[0])[0] is clustered_tma_backward_kernel
    op._BACKWARD_PLANS.clear()
    atol, rtol = tolerance(dtype)
    for run, d in ((softmax_backward, dys[0]), (op.softmax_backward, dys[1]), (op.softmax_backward, dys[2])):
        torch.testing.assert_close(run(y, d).double(), softmax_backward_ref(y, d), atol=atol * 10, rtol=rtol)
    y2 = torch.softmax(_randn(shape), -1).to(dtype)  # the plan again, with another y
    torch.testing.assert_close(op.softmax_backward(y2, dys[0]).double(), softmax_backward_ref(y2, dys[0]),
                               atol=atol * 10, rtol=rtol)
    wide = torch.softmax(_randn((shape[0], shape[1] + 1)), -1).to(dtype)[:, 1:]  # (rows one element in: not flat)
    assert backward.tma_knobs(wide, wide, torch.empty_like(wide)) is None
    monkeypatch.setitem(tuning.TMA_BACKWARD_FLAT, size, [(None, None)])
    assert backward.tma_knobs(y, dys[0], y) is None
    assert backward.launch_setup(torch.empty_like(y), y, dys[0])[0] is not clustered_tma_backward_kernel


@HOPPER
@pytest.mark.parametrize("kernel, n_rows, n_cols, dtype", [("tma", (1 << 14) + 1, 131072, BF16),
                                                           ("tma", 14135, 151936, torch.float32),  # (held: round 17)
                                                           ("resident", 42800, 50257, torch.float16)])
def test_long_row_backward_more_than_2_31_elements(kernel, n_rows, n_cols, dtype):
    # 2.15e9 elements, row * stride past 2**31, on the kernel the dispatcher picks for those rows
    from softmax_lab.kernels.backward import resident_knobs, tma_knobs

    y = torch.empty((n_rows, n_cols), dtype=dtype, device="cuda")
    y.uniform_(0, 1e-4)
    dy = torch.empty_like(y).normal_(0, 1)
    assert (tma_knobs if kernel == "tma" else resident_knobs)(y, dy, y)
    dx = softmax_backward(y, dy)
    rows = torch.tensor([0, 1, n_rows // 2, n_rows - 2, n_rows - 1], device="cuda")
    torch.testing.assert_close(dx[rows].double(), softmax_backward_ref(y[rows], dy[rows]), atol=1e-3, rtol=1e-2)



# Rows far from zero. A kernel that took exp(x - max) as exp2(x·log2 e - max·log2 e) (one fused multiply-add)
# overflowed max·log2 e to inf past 2.36e38, and past ~1.5e9 its rounding alone (half an ulp of max·log2 e, up to
# 2**103) made exp2 overflow or vanish: NaN rows where torch gives a one-hot or uniform row (helper-75, round 11;
# the shared-memory kernels until round 12). Every kernel now takes its exps from x - max, or corrects the rounding
# exactly and takes rows far from 0 from x - max (chunk_state.py).
HUGE = 3e38


def _huge_rows(n_cols, dtype):
    x = torch.full((12, n_cols), -HUGE, device="cuda")
    x[0, 10] = HUGE  # one-hot
    x[1] = HUGE  # uniform
    x[2, ::7] = HUGE  # uniform over the ones at +3e38
    x[3, -1] = -HUGE / 2  # one-hot at the row's last element (row 4: all -3e38, uniform)
    x[5] = 1e10  # uniform (max·log2 e rounded: 440 off, so exp2 of it was 0)
    x[6] = 1e5 + torch.randn(n_cols, device="cuda") * 3  # a spread row, far from 0
    x[7] = -1e10 + torch.randn(n_cols, device="cuda") * 3e9
    x[8] = 1.6e7 + torch.randn(n_cols, device="cuda") * 3  # just inside chunk_state.FAR (2**24): the fold's exps
    x[9] = -1.7e7 + torch.randn(n_cols, device="cuda") * 3  # just past it: the sum again, from x - max
    x[10:] = torch.randn(2, n_cols, device="cuda") * 3  # left padding, a thread's max far and then ordinary (its
    x[10, :8] = -1e10  # exps had overflowed: inf·0; helper-80's review)
    x[11, :100] = -1e30
    return x.to(dtype)  # (odd widths: rows 1-11 start off 16 bytes)


@pytest.mark.parametrize("n_cols, dtype", [
    (8192, BF16), (4096, torch.float32), (1000, BF16), (150000, torch.float32), (28672, BF16),
    (20000, torch.float32), (65536, BF16), (50257, BF16), (30001, BF16), (131072, BF16)], ids=str)
def test_rows_of_huge_finite_values(n_cols, dtype):
    x = _huge_rows(n_cols, dtype)
    y = softmax(x)
    torch.testing.assert_close(y.double(), torch.softmax(x.double(), -1), atol=1e-6, rtol=tolerance(dtype)[1])


@HOPPER
@pytest.mark.parametrize("name, n_cols, dtype, knobs", [
    ("resident", 28672, BF16, {}), ("resident", 12000, torch.float32, dict(overlap=True)),
    ("resident", 16384, BF16, dict(online=True)), ("staged", 4000, torch.float32, {}),
    ("clustered", 65536, BF16, {}), ("clustered", 65536, torch.float32, dict(online=True)),
    ("clustered", 100000, BF16, dict(dsmem=True)), ("clustered", 100000, BF16, dict(dsmem=True, online=True)),
    ("unaligned_resident", 50257, BF16, {}), ("unaligned_resident", 20001, torch.float32, dict(online=True)),
    ("clustered_tma", 65536, BF16, {}), ("clustered_tma", 100000, torch.float32, dict(parts=16, num_warps=4)),
    ("clustered_tma", 151936, torch.float32, dict(parts=8, num_warps=8)),
    ("clustered_tma", 128256, BF16, dict(parts=8, num_warps=4, stream=True)),
    ("clustered_tma", 151936, torch.float32, dict(parts=16, num_warps=4, stream=True))],
    ids=str)
def test_shared_memory_kernels_on_huge_finite_values(name, n_cols, dtype, knobs):
    x = _huge_rows(n_cols, dtype)
    fn = kernels.UNALIGNED[name] if name == "unaligned_resident" else kernels.GPU_ONLY[name]
    y = fn(x, **knobs)
    torch.testing.assert_close(y.double(), torch.softmax(x.double(), -1), atol=1e-6, rtol=tolerance(dtype)[1])
