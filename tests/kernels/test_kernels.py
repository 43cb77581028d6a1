"""Every kernel in softmax_lab.kernels against the float64 reference, on the CPU interpreter (and on the GPU
when there is one). Sizes stay tiny: the interpreter runs each program in Python. The naive and row-serial
kernels (O(N²) loads, scalar loops) only see the smallest shapes here; tests/kernels/test_gpu.py runs them bigger.
"""
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import softmax_lab
from softmax_lab import kernels, op
from softmax_lab.kernels import ALL, exp_buffer_bytes, masked_softmax, softmax_backward
from softmax_lab.reference import masked_softmax_ref, softmax_backward_ref, softmax_ref
from softmax_lab.testing import assert_softmax_correct, check_softmax, poisoned_like, randn, tolerance

DEV = softmax_lab.DEVICE
FAST = ["three_pass", "fused", "multirow", "online", "split_row"]
SLOW = ["naive", "row_serial"]
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
# Knobs that force the multi-tile / multi-program paths on tiny rows.
SMALL_TILES = {"naive": dict(BLOCK=16), "three_pass": dict(BLOCK=16), "online": dict(BLOCK=16),
               "split_row": dict(chunks=3, BLOCK=16), "multirow": dict(ROWS=4), "fused": dict(num_warps=1),
               "row_serial": {}}


def test_all_lists_every_kernel():
    assert list(ALL) == ["naive", "row_serial", "three_pass", "fused", "multirow", "online", "split_row"]
    for f in ALL.values():
        assert callable(f)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", FAST)
def test_fast_kernels_standard_cases(name, dtype):
    # Boundary shapes, all-negative row, [1000, 1001, 1002], identical values, strided big[:, :1000].
    assert_softmax_correct(ALL[name], dtype)


@pytest.mark.parametrize("name", SLOW)
def test_slow_kernels_small_cases(name):
    shapes = [(1, 1), (2, 31), (3, 32), (4, 33)] + ([(2, 255), (3, 257)] if name == "row_serial" else [])
    assert_softmax_correct(ALL[name], torch.float32, shapes=shapes, strided=False)
    assert_softmax_correct(ALL[name], torch.float16, shapes=[(2, 33)], strided=False)


@pytest.mark.parametrize("name", list(ALL))
def test_strided_rows(name):
    big = randn((3, 50), device=DEV)
    assert check_softmax(ALL[name], big[:, :37]) == ""
    assert check_softmax(ALL[name], big[::2, 5:40]) == ""  # every other row, offset start


@pytest.mark.parametrize("name", [n for n in ALL if n != "row_serial"])
def test_multi_tile_paths(name):
    # Rows several tiles long (or several rows per program), row count not a multiple of anything.
    x = randn((5, 70), device=DEV)
    assert check_softmax(lambda t, out=None: ALL[name](t, out=out, **SMALL_TILES[name]), x) == ""


@pytest.mark.parametrize("name", list(ALL))
def test_writes_into_out(name):
    x = randn((3, 20), device=DEV)
    out = poisoned_like(x)
    y = ALL[name](x, out=out)
    assert y.data_ptr() == out.data_ptr()
    torch.testing.assert_close(out.double(), softmax_ref(x), atol=1e-6, rtol=1e-5)


def _like_torch(y, x):
    ref = torch.softmax(x.double(), dim=-1)
    assert torch.equal(torch.isnan(y), torch.isnan(ref)), (y, ref)
    torch.testing.assert_close(y.double(), ref, atol=1e-6, rtol=1e-5, equal_nan=True)


@pytest.mark.parametrize("name", list(ALL))
def test_nan_and_inf_follow_torch(name):
    inf, nan = float("inf"), float("nan")
    x = torch.tensor([[1.0, nan, 2.0, 0.5],        # NaN anywhere -> row of NaN
                      [1.0, inf, 2.0, 0.5],        # +inf -> NaN (inf - inf)
                      [-inf, -inf, -inf, -inf],    # all -inf -> NaN, like torch.softmax
                      [-inf, 3.0, -inf, 1.0],      # some -inf -> exact zeros there
                      [-1e30, -1e30, 0.0, -5.0]], device=DEV)
    _like_torch(ALL[name](x), x)


@pytest.mark.parametrize("name", ["online", "split_row", "three_pass"])
def test_whole_tile_of_minus_inf(name):
    # The first tiles (and a whole chunk) are -inf, finite values come later: the running (m, l) must not go NaN.
    x = randn((2, 64), device=DEV)
    x[:, :40] = float("-inf")
    knobs = dict(BLOCK=16, chunks=4) if name == "split_row" else dict(BLOCK=16)
    y = ALL[name](x, **knobs)
    _like_torch(y, x)
    assert (y[:, :40] == 0).all()


@pytest.mark.parametrize("name", list(ALL))
def test_errors(name):
    f = ALL[name]
    with pytest.raises(TypeError, match="dtype"):
        f(torch.ones(2, 3, dtype=torch.int32, device=DEV))
    with pytest.raises(ValueError, match="2-D"):
        f(torch.ones(2, 3, 4, device=DEV))
    with pytest.raises(ValueError, match="out"):
        f(torch.ones(2, 3, device=DEV), out=torch.empty(3, 2, device=DEV))


@pytest.mark.parametrize("name", [n for n, limit in kernels.MAX_COLS.items() if limit])
def test_row_too_long_is_a_value_error(name):
    x = torch.empty((1, kernels.MAX_COLS[name] + 1), device=DEV)  # raises before any launch
    with pytest.raises(ValueError, match="supports rows of up to"):
        ALL[name](x)


def test_empty_inputs():
    for name in ALL:
        for shape in [(0, 5), (3, 0)]:
            assert ALL[name](torch.empty(shape, device=DEV)).shape == shape


def test_three_pass_buffer_is_real():
    assert exp_buffer_bytes(torch.empty((4096, 1024), device="meta")) == 16 * 2**20
    x = randn((3, 40), device=DEV)
    y, buf = ALL["three_pass"](x, return_buffer=True)
    assert buf.shape == x.shape and buf.dtype == torch.float32 and buf.nbytes == exp_buffer_bytes(x)
    torch.testing.assert_close(buf.double(), torch.exp(x.double() - x.double().amax(-1, keepdim=True)))


@settings(max_examples=20, deadline=None)
@given(name=st.sampled_from(FAST), rows=st.integers(1, 6), cols=st.integers(1, 300),
       dtype=st.sampled_from(DTYPES), scale=st.sampled_from([0.1, 3.0, 100.0]))
def test_random_shapes(name, rows, cols, dtype, scale):
    x = randn((rows, cols), dtype, DEV, scale=scale)
    assert check_softmax(ALL[name], x) == ""


# ---- masked ---------------------------------------------------------------------------------------------


def _check_masked(scores, mask):
    y = masked_softmax(scores, mask)
    assert y.shape == scores.shape and y.dtype == scores.dtype
    atol, rtol = tolerance(scores.dtype)
    torch.testing.assert_close(y.double(), masked_softmax_ref(scores, mask), atol=atol, rtol=rtol)
    return y


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_masked_causal_and_padding(dtype):
    B, H, S = 2, 3, 9
    scores = randn((B, H, S, S), dtype, DEV)
    causal = torch.ones(S, S, dtype=torch.bool, device=DEV).tril()
    _check_masked(scores, causal)
    _check_masked(scores, torch.zeros(S, S, device=DEV).masked_fill(~causal, float("-inf")))  # additive
    lengths = torch.tensor([5, 9], device=DEV)
    padding = (torch.arange(S, device=DEV)[None, :] < lengths[:, None])[:, None, None, :]  # [B, 1, 1, S]
    _check_masked(scores, padding)
    _check_masked(scores, causal & padding)
    _check_masked(scores, None)
    _check_masked(scores, randn((1, H, 1, S), dtype, DEV))  # a float bias, broadcast


def test_masked_rows_fully_masked_give_zeros():
    scores = randn((1, 2, 4, 6), device=DEV)
    mask = torch.ones(4, 6, dtype=torch.bool, device=DEV)
    mask[1] = False
    scores[0, 0, 1, 2] = float("nan")  # masked out: must not leak
    y = _check_masked(scores, mask)
    assert (y[:, :, 1] == 0).all()
    torch.testing.assert_close(y[:, :, [0, 2, 3]].sum(-1).double().cpu(), torch.ones(1, 2, 3, dtype=torch.float64))
    add = torch.full((6,), float("-inf"), device=DEV)  # additive -inf everywhere
    assert (masked_softmax(randn((1, 2, 4, 6), device=DEV), add) == 0).all()


def test_masked_any_rank_and_errors():
    _check_masked(randn((7, 12), device=DEV), torch.rand(12, device=DEV) > 0.3)
    _check_masked(randn((2, 2, 2, 3, 10), device=DEV), torch.rand(3, 10, device=DEV) > 0.3)
    s = randn((2, 3, 4, 5), device=DEV)
    with pytest.raises(ValueError, match="broadcast"):
        masked_softmax(s, torch.ones(3, 5, dtype=torch.bool, device=DEV))
    with pytest.raises(TypeError, match="mask"):
        masked_softmax(s, torch.ones(4, 5, dtype=torch.int64, device=DEV))
    with pytest.raises(ValueError, match="mask is on"):
        masked_softmax(s, torch.ones(4, 5, dtype=torch.bool, device="meta"))
    with pytest.raises(TypeError):
        masked_softmax(s.int(), None)


# ---- backward -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape,knobs", [((5, 37), {}), ((3, 70), dict(BLOCK=16)), ((9, 20), dict(ROWS=4)),
                                         ((1, 1), {})])
def test_backward(shape, knobs, dtype):
    y = torch.softmax(randn(shape, device=DEV), -1).to(dtype)
    dy = randn(shape, dtype, DEV)
    out = poisoned_like(y)
    dx = softmax_backward(y, dy, out=out, **knobs)
    assert dx.data_ptr() == out.data_ptr() and dx.dtype == dtype
    atol, rtol = tolerance(dtype)
    torch.testing.assert_close(dx.double(), softmax_backward_ref(y, dy), atol=atol * 10, rtol=rtol)


def test_backward_strided_and_errors():
    big = randn((4, 60), device=DEV)
    y = torch.softmax(big, -1)[:, :33]
    dy = big[:, 10:43]
    torch.testing.assert_close(softmax_backward(y, dy).double(), softmax_backward_ref(y, dy), atol=1e-5, rtol=1e-4)
    with pytest.raises(ValueError, match="shape"):
        softmax_backward(y, dy[:, :5])
    with pytest.raises(TypeError):
        softmax_backward(y.int(), dy)


def test_autograd_function_in_a_model():
    x = randn((4, 30), device=DEV).requires_grad_()
    y = op.SoftmaxFunction.apply(x, kernels.fused_softmax)
    w = randn((4, 30), device=DEV)
    (y * w).sum().backward()
    x64 = x.detach().double().requires_grad_()
    (torch.softmax(x64, -1) * w.double()).sum().backward()
    torch.testing.assert_close(x.grad.double(), x64.grad, atol=1e-5, rtol=1e-4)
    assert not math.isnan(float(x.grad.sum()))


def test_the_autograd_function_moved_to_the_operator_says_where():
    # A notebook saved before SoftmaxFunction moved (kernels import nothing above them) is told the new import.
    with pytest.raises(ImportError, match="from softmax_lab.op import SoftmaxFunction"):
        from softmax_lab.kernels import SoftmaxFunction  # noqa: F401 - the import is what is tested


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_rows_of_whole_vectors_in_vector_units(dtype):
    # The register kernels take their ints in 16-byte vectors when every row is whole vectors (VEC > 1), even
    # where they are not multiples of 16; any row, stride or output that is not whole vectors gives VEC = 1. Both
    # ways must give the same, right, softmax; so must the backward.
    from softmax_lab.kernels._launch import row_vector

    vec = 16 // torch.empty((), dtype=dtype).element_size()
    n = 5 * vec  # whole vectors, not a multiple of 16 elements (20 fp32, 40 fp16/bf16)
    big = randn((6, n + 3 * vec), dtype, DEV)
    cases = {"contiguous": (randn((7, n), dtype, DEV), None, vec),
             "stride of whole vectors": (big[:, :n], None, vec),
             "start one vector in": (big[:, vec:vec + n], None, vec),
             "start one element in": (big[:, 1:1 + n], None, vec),  # (the compiler sees the pointer's alignment)
             "odd stride": (randn((5, n + 1), dtype, DEV)[:, :n], None, 1),
             "row not whole vectors": (big[:, :n - 1], None, 1),
             "odd output stride": (big[:, :n], poisoned_like(randn((6, n + 1), dtype, DEV))[:, :n], 1)}
    for what, (x, out, expected) in cases.items():
        assert row_vector(x.shape[1], x, x if out is None else out) == expected, what
        for name in ("fused", "multirow"):
            assert check_softmax(ALL[name], x) == "", (name, what)
            if out is not None:
                y = ALL[name](x, out=out)
                assert y.data_ptr() == out.data_ptr(), (name, what)
                torch.testing.assert_close(y.double(), softmax_ref(x), **dict(zip(("atol", "rtol"), tolerance(dtype))))
        y = torch.softmax(x.float(), -1).to(dtype)
        dy = randn(x.shape, dtype, DEV)
        atol, rtol = tolerance(dtype)
        torch.testing.assert_close(softmax_backward(y, dy).double(), softmax_backward_ref(y, dy), atol=atol * 10,
                                   rtol=rtol)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_backward_with_rows_of_whole_vectors_and_their_own_strides(dtype):
    # y, dy and dx each with its own row stride: all whole vectors (VEC > 1), or one of them odd (VEC = 1); the
    # tile kernel and the cooperative one (several chunks a row), into an out= view whose padding stays put.
    from softmax_lab.kernels._launch import row_vector
    from softmax_lab.kernels.cooperative import cooperative_backward

    vec = 16 // torch.empty((), dtype=dtype).element_size()
    n = 4 * vec
    for dy_pad, dx_pad, expected in ((2 * vec, vec, vec), (2 * vec + 1, vec, 1), (2 * vec, 1, 1)):
        y = torch.softmax(randn((5, n + vec), device=DEV), -1).to(dtype)[:, :n]
        dy = randn((5, n + dy_pad), dtype, DEV)[:, :n]
        wide = poisoned_like(randn((5, n + dx_pad), dtype, DEV))
        assert row_vector(n, y, dy, wide[:, :n]) == expected
        ref = softmax_backward_ref(y, dy)
        atol, rtol = tolerance(dtype)
        for run in (lambda out: softmax_backward(y, dy, out=out),
                    lambda out: cooperative_backward(y, dy, out, BLOCK=vec)):
            out = wide.clone()
            dx = run(out[:, :n])
            torch.testing.assert_close(dx.double(), ref, atol=atol * 10, rtol=rtol)
            assert torch.isnan(out[:, n:]).all()  # the padding of the output's rows is left alone


def test_strides_of_2_31_or_more_stay_64_bit_ints():
    # The kernels multiply an int passed in vectors back by VEC in 32 bits (the faster order), so rows 2**31 or
    # more elements apart get VEC = 1 (the stride goes in as it is, a 64-bit int) and the Gluon kernels refuse
    # them. Meta tensors: strides without the memory.
    from softmax_lab.kernels._launch import row_vector, vector_refusal

    far = torch.empty_strided((2, 1024), (2**31 + 1024, 1), device="meta")
    near = torch.empty_strided((2, 1024), (2**31 - 1024, 1), device="meta")
    assert row_vector(1024, far, far) == 1 and row_vector(1024, near, near) == 4
    assert row_vector(1024, far) == 1 and row_vector(1024, near) == 4  # (the Gluon kernels' OUT_VEC)
    assert "2**31" in vector_refusal(far, "resident_softmax")


# Rows that do not start on 16 bytes (kernels/unaligned.py), tiny: contiguous odd widths, a view one element in
# (rows lie unlike the output's), an odd row stride; the tile, the cooperative form and the backward forms.
def _unaligned_cases(dtype):
    for n_rows, n in ((3, 1), (5, 13), (2, 33)):
        yield randn((n_rows, n), dtype, DEV)
        yield randn((n_rows, n + 9), dtype, DEV)[:, 1:n + 1]
        yield randn((n_rows, n + 1), dtype, DEV)[:, :n]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_unaligned_kernels_interpreted(dtype):
    from softmax_lab import dispatch
    from softmax_lab.kernels.unaligned import (takes, unaligned_backward, unaligned_cooperative_softmax,
                                               unaligned_softmax)

    atol, rtol = tolerance(dtype)
    for x in _unaligned_cases(dtype):
        x[0, 0] = float("-inf") if x.shape[1] > 1 else x[0, 0]  # (a row of one -inf is NaN)
        ref = softmax_ref(x)
        assert takes(x)
        assert dispatch._runnable(x)[0] == (dispatch.choose_unaligned(x.shape[1], dtype) or ["multirow"])[0]
        for y in (unaligned_softmax(x, out=poisoned_like(x), ROWS=2),
                  unaligned_cooperative_softmax(x, out=poisoned_like(x), BLOCK=8), softmax_lab.softmax(x)):
            torch.testing.assert_close(y.double(), ref, atol=atol, rtol=rtol)
        y = ref.to(dtype)
        dy = randn(x.shape, dtype, DEV)
        want = softmax_backward_ref(y.double(), dy.double())
        for block in (None, 8):  # tiles; cooperative programs (BLOCK=8: windows longer than one tile)
            dx = unaligned_backward(y, dy, poisoned_like(x), BLOCK=block)
            torch.testing.assert_close(dx.double(), want, atol=10 * atol, rtol=rtol)
        torch.testing.assert_close(softmax_backward(y, dy).double(), want, atol=10 * atol, rtol=rtol)


def test_unaligned_windows_and_rules():
    # Which rows the unaligned kernels take, how their windows start, and where the dispatcher sends them.
    from softmax_lab import dispatch
    from softmax_lab.kernels.unaligned import takes, windows

    big = torch.empty(6, 1008, device=DEV)
    assert not takes(big[:, :1000])  # rows of whole 16-byte vectors on 16 bytes: the register kernels' VEC
    assert takes(big[:, :77])  # rows on 16 bytes, but the width is not whole vectors
    assert takes(torch.empty(6, 77, device=DEV)) and takes(big[:, 1:1001])
    (x_base, y_base), firsts, alike = windows(big[:, 1:1001], torch.empty(6, 1000, device=DEV))
    assert firsts == [1, 0] and not alike and x_base.data_ptr() % 16 == 0
    assert x_base.data_ptr() + 4 == big[:, 1:1001].data_ptr()
    assert windows(torch.empty(3, 77, device=DEV), torch.empty(3, 77, device=DEV))[2]  # rows alike: pieces
    assert dispatch.choose_unaligned(77, torch.float32) == ("unaligned", dict(ROWS=8, num_warps=2))
    assert dispatch.choose_unaligned(1000, torch.float32) == ("unaligned", dict(ROWS=1, num_warps=4))
    assert dispatch.choose_unaligned(50257, torch.bfloat16)[0] == "unaligned_resident"  # (a GPU's; see below)
    assert dispatch.choose_unaligned(65537, torch.bfloat16)[0] == "unaligned_cooperative"
    assert dispatch.choose_unaligned(130, torch.bfloat16) == ("multirow", dict(ROWS=8, num_warps=1))
    assert dispatch.choose_unaligned(1000, torch.bfloat16) is None  # 16-bit tiles keep the register kernels
    assert dispatch.choose_unaligned(50257, torch.float32) == ("unaligned_resident",
                                                               dict(num_warps=16, line=128, online=True))
    assert dispatch.choose_unaligned(65537, torch.float32) is None  # fp32 cooperative rows keep the register kernels


def test_resident_refuses_online_past_32_chunks():
    # online folds each chunk as it lands (wait_group counts): a row of more than 32 chunks is refused, so the
    # dispatcher falls back instead of raising; 8 warps take the longest row of FORWARD's resident rules
    from softmax_lab.kernels import resident

    x = torch.empty((2, 28672), dtype=torch.float32)
    assert "at most 32 chunks" in resident.refusal(x, num_warps=4, online=True)
    assert "chunks" not in resident.refusal(x, num_warps=8, online=True)
    assert "chunks" not in resident.refusal(x, num_warps=4)


def test_the_unaligned_gluon_kernel_falls_back_off_the_gpu():
    # unaligned_resident (a Gluon kernel) cannot run in the interpreter: the dispatcher sends its rows to the
    # cooperative window kernel there, and the launcher itself says what to use instead.
    from softmax_lab import dispatch
    from softmax_lab.kernels.unaligned_resident import refusal, unaligned_resident_softmax

    x = torch.empty(2, 20001, dtype=torch.bfloat16, device=DEV)
    assert dispatch.choose_unaligned(20001, torch.bfloat16)[0] == "unaligned_resident"
    if DEV.type == "cpu":  # long rows: the cooperative window kernel; shorter ones (and fp32): the register kernels
        assert dispatch._runnable(x) == ("unaligned_cooperative", dict(BLOCK=4096, num_warps=4))
        assert dispatch._runnable(x[:, :4001])[0] == "fused"
        assert dispatch._runnable(torch.empty(2, 40001, device=DEV))[0] == "cooperative"
        assert dispatch._runnable(torch.empty(2, 20001, device=DEV)) == ("unaligned", dict(ROWS=1, num_warps=32))
        assert "unaligned_cooperative_softmax" in refusal(x)
        with pytest.raises(ValueError, match="needs a GPU"):
            unaligned_resident_softmax(x)
    # 16-bit rows of whole 8-byte pieces that FORWARD gives fused or multirow stay there (8 bytes at a time);
    # those a little past a power of two take the tail tiles (TAIL_TILES), in pieces too
    assert dispatch._runnable(torch.empty(2, 6100, dtype=torch.bfloat16, device=DEV))[0] == "fused"
    assert dispatch._runnable(torch.empty(2, 4100, dtype=torch.bfloat16, device=DEV)) == ("multirow", dict(
        ROWS=1, num_warps=8, tail=True))
    assert dispatch._runnable(torch.empty(2, 130, dtype=torch.bfloat16, device=DEV)) == ("multirow", dict(
        ROWS=8, num_warps=1, tail=True))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_rows_in_pieces_narrower_than_a_vector(dtype):
    # 16-bit rows that are not whole 16-byte vectors but whole 4- or 8-byte pieces (a bf16 row of 130 elements:
    # 260 bytes) go to the register kernels in those pieces (``part_vector``); odd lengths or strides in
    # elements; fp32 rows in elements (8-byte pieces measured no faster).
    from softmax_lab.kernels._launch import part_vector, row_vector

    vec = 16 // torch.empty((), dtype=dtype).element_size()
    for n, expected in ((vec * 5, vec), (vec // 2 * 5, vec // 2), (2 * 9, 2), (13, 1), (1, 1)):
        x = randn((6, n), dtype, DEV)
        assert part_vector(n, x, x) == expected, (n, expected)
        assert row_vector(n, x, x) == (vec if expected == vec else 1)
        odd = randn((6, n + 1), dtype, DEV)[:, :n]  # an odd row stride: elements
        assert part_vector(n, odd, x) == 1
        for name in ("fused", "multirow"):
            for t in (x, odd):
                assert check_softmax(ALL[name], t) == "", (name, n)
    assert part_vector(130, torch.empty(3, 130, dtype=torch.bfloat16, device=DEV)) == 2
    assert part_vector(4100, torch.empty(3, 4100, dtype=torch.bfloat16, device=DEV)) == 4
    assert part_vector(10, torch.empty(3, 10, device=DEV)) == 1
    far = torch.empty_strided((2, 1030), (2**31 + 2, 1), dtype=torch.bfloat16, device="meta")
    assert part_vector(1030, far) == 1  # (rows 2**31 or more apart: 64-bit ints, as row_vector)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_multirow_tail(dtype):
    # tail=True: a row as a power-of-two tile and a narrow tail tile (130 = 128 + 2, 77 = 64 + 16, 9 = 8 + 1).
    tail = lambda x, out=None: ALL["multirow"](x, out=out, tail=True)
    assert_softmax_correct(tail, dtype)
    for shape in [(5, 9), (9, 77), (4, 130), (3, 144)]:
        x = randn(shape, device=DEV, dtype=dtype)
        x[0] = float("-inf")  # an all -inf row: NaN, as torch gives
        x[1, : shape[1] // 2] = float("-inf")
        for rows in (1, 4):
            assert check_softmax(lambda t, out=None: ALL["multirow"](t, out=out, ROWS=rows, tail=True), x) == ""
    big = randn((6, 300), device=DEV, dtype=dtype)
    assert check_softmax(tail, big[::2, 3:133]) == ""  # strided rows, not on 16 bytes


def test_multirow_tail_tiles():
    from softmax_lab import dispatch
    from softmax_lab.kernels.multirow import launch_setup

    def tiles(n_cols, dtype=torch.float32, BLOCK=None):
        x = torch.empty((2, n_cols), dtype=dtype, device=DEV)
        o = launch_setup(torch.empty_like(x), x, BLOCK=BLOCK, tail=True)[3]
        return o["BLOCK"], o["TAIL"], o["VEC"]
    assert tiles(130) == (128, 2, 1)
    assert tiles(130, torch.bfloat16) == (128, 2, 2)  # 4-byte pieces: the tail is one of them
    assert tiles(77) == (64, 16, 1)
    assert tiles(128) == (128, 0, 4)  # a power of two: no tail
    assert tiles(144, torch.bfloat16) == (128, 16, 8)
    assert tiles(130, BLOCK=128) == (128, 2, 1) and tiles(130, BLOCK=256) == (256, 0, 1)
    with pytest.raises(ValueError, match="BLOCK=64 must hold at least half the row"):
        tiles(130, BLOCK=64)  # (the tail tile would be wider than the first)
    with pytest.raises(TypeError, match="tail must be True or False"):
        ALL["multirow"](torch.ones((2, 3), device=DEV), tail=1)
    assert dispatch.tail_knobs(0, torch.float32) is None and dispatch.tail_knobs(1, torch.bfloat16) is None
    assert softmax_lab.softmax(torch.empty((3, 0), device=DEV)).shape == (3, 0)


def test_rows_a_little_past_a_power_of_two_take_the_tail_tiles():
    # TAIL_TILES: 16-bit rows, and fp32 rows that are not whole 16-byte vectors, whose part past the largest power
    # of two fits a quarter of it; others keep FORWARD's tiles (and the window kernels).
    from softmax_lab import dispatch

    tail = lambda n, dtype: dispatch.tail_knobs(n, dtype)
    assert tail(130, torch.bfloat16) == dict(ROWS=8, num_warps=1, tail=True)
    assert tail(1100, torch.float16) == dict(ROWS=1, num_warps=1, tail=True)
    assert tail(8200, torch.bfloat16) == dict(ROWS=1, num_warps=8, tail=True)
    assert tail(77, torch.float32) == dict(ROWS=8, num_warps=1, tail=True)
    assert tail(2050, torch.float32) == dict(ROWS=1, num_warps=8, tail=True)
    for n, dtype in ((128, torch.bfloat16), (160, torch.bfloat16), (1000, torch.float32), (80, torch.float32),
                     (4100, torch.float32), (16400, torch.bfloat16), (50257, torch.bfloat16), (33, torch.float32)):
        assert tail(n, dtype) is None, (n, dtype)  # a power of two, a 16-bit tail over an eighth, whole fp32 vectors
    assert dispatch.choose(8, 130, torch.float32)[0::2] == ("multirow", dict(ROWS=4, num_warps=1, tail=True))
    x = randn((9, 77), device=DEV)
    assert dispatch._runnable(x)[0] == "multirow"  # before the unaligned tile
    assert check_softmax(lambda t, out=None: softmax_lab.softmax(t), x) == ""


def test_the_resident_backward_falls_back_off_the_gpu():
    # resident_backward (a Gluon kernel) cannot run in the interpreter: softmax_backward keeps the cooperative
    # kernels there, and the launcher says what to use instead.
    from softmax_lab.kernels import softmax_backward
    from softmax_lab.kernels.backward import launch_setup, resident_knobs
    from softmax_lab.kernels.resident_backward import refusal, resident_backward
    from softmax_lab.kernels.tuning import RESIDENT_BACKWARD, pick

    assert pick(RESIDENT_BACKWARD[2], 50257) == 16 and pick(RESIDENT_BACKWARD[2], 16384) is None
    assert pick(RESIDENT_BACKWARD[4], 20001) == 8 and pick(RESIDENT_BACKWARD[4], 40000) is None
    y = torch.softmax(torch.randn(3, 20001, device=DEV), -1).to(torch.bfloat16)
    dy = torch.randn(3, 20001, device=DEV).to(torch.bfloat16)
    if DEV.type == "cpu":
        assert resident_knobs(y, dy, torch.empty_like(y)) is None
        assert launch_setup(torch.empty_like(y), y, dy)[0].fn.__name__ != "resident_backward_kernel"
        assert "softmax_backward" in refusal(y, dy, y)
        with pytest.raises(ValueError, match="needs a GPU"):
            resident_backward(y, dy)
    with pytest.raises(ValueError, match="shape"):
        resident_backward(y, dy[:, :-1])
    with pytest.raises(ValueError, match="num_warps"):
        resident_backward(y, dy, num_warps=3)
    with pytest.raises(ValueError, match="line must be one of"):
        resident_backward(y, dy, line=100)
    want = softmax_backward(y, dy)
    torch.testing.assert_close(want.double(), (y.double() * (dy.double() - (y.double() * dy.double()).sum(-1,
                               keepdim=True))), atol=2e-2, rtol=2e-2)
    # dx may be dy itself, not a part of it (nor of y): every launcher says so
    wide = torch.randn(3, 20002, device=DEV).to(torch.bfloat16)
    for launch in (softmax_backward, resident_backward):
        with pytest.raises(ValueError, match="overlaps dy"):
            launch(y, wide[:, 1:], out=wide[:, :-1])
    z = dy.clone()
    torch.testing.assert_close(softmax_backward(y, z, out=z), want, atol=0, rtol=0)
    # dx beside dy, or beside y, in one buffer: allowed (they share no element); over part of y: refused, named y
    for launch in (softmax_backward, resident_backward):
        halves = torch.cat([dy, torch.full_like(dy, float("nan"))], dim=1)
        if launch is softmax_backward or not refusal(y, halves[:, :20001], halves[:, 20001:]):
            launch(y, halves[:, :20001], out=halves[:, 20001:])
            # out starts 20001 elements in (off 16 bytes): the unaligned kernel sums in another order, so it may
            # differ from want by one bf16 step (5 seeds in 40 did), not bit for bit
            torch.testing.assert_close(halves[:, 20001:], want)
            torch.testing.assert_close(halves[:, :20001], dy, atol=0, rtol=0)
        with pytest.raises(ValueError, match="overlaps y in memory .only out=y itself"):
            launch(wide[:, :-1], dy, out=wide[:, 1:])


def test_overlaps_is_exact_for_rows_and_safe_otherwise():
    from softmax_lab.kernels._launch import overlaps

    buf = torch.zeros(1000)
    rows = buf[:800].view(20, 40)
    assert not overlaps(rows[:, :15], rows[:, 15:])  # one buffer, no element in common
    assert overlaps(rows[:, :16], rows[:, 15:])  # column 15 in both
    assert not overlaps(rows[::2], rows[1::2])  # every other row
    assert overlaps(rows[:, :1], buf[40:41].view(1, 1))  # row 1's first element
    assert not overlaps(buf[:40].view(4, 10), buf[40:80].view(4, 10))
    assert not overlaps(buf[0:800].as_strided((20, 3), (40, 1)), buf.as_strided((10, 3), (80, 1), 3))  # strides differ
    assert overlaps(buf[0:800].as_strided((20, 3), (40, 1)), buf.as_strided((10, 3), (80, 1), 2))  # element 2
    assert not overlaps(buf[:10].view(1, 10), buf.view(torch.float16)[20:30].view(1, 10))  # bytes 40-59, not 0-39
    assert overlaps(rows.t(), rows[:, :1])  # column 0 of rows.t() is row 0 of rows
    assert not overlaps(rows[:, :4].t(), rows[:, 4:])  # a transposed view beside another: exact through .t()
    assert overlaps(buf[:6].as_strided((2, 2), (3, 2)), buf[2:3].view(1, 1))  # neither rows nor columns: byte ranges
    from softmax_lab.kernels._launch import refuse_overlap

    with pytest.raises(ValueError, match="overlaps dy"):  # dx over dy's memory in another dtype is not dy itself
        refuse_overlap(buf.view(torch.float16).as_strided((4, 10), (10, 1)), buf.as_strided((4, 10), (10, 1)))
    assert not overlaps(rows, torch.zeros(20, 40))  # other memory


def near(got, want):
    torch.testing.assert_close(got.double(), want.double(), atol=1e-5, rtol=1e-4)


def softmax64(x):
    return torch.softmax(x.double(), -1)


def test_out_over_an_input_whose_rows_are_copied_is_refused():
    # A transposed x is copied to contiguous rows before the kernel reads it; its out is still checked against the
    # caller's x, as torch checks it: an out over x's own memory is refused, not written while x is read.
    from softmax_lab.kernels import cooperative_backward, softmax_backward

    a = randn((40, 3), device=DEV, seed=81)
    for launch in kernels.ALL.values():
        with pytest.raises(ValueError, match="out overlaps x"):
            launch(a.t(), out=a.view(3, 40))
        near(launch(a.t(), out=torch.empty(3, 40, device=DEV)), softmax64(a.t()))
    y = torch.softmax(randn((40, 3), device=DEV, seed=82), 0)
    dy = randn((3, 40), device=DEV, seed=83)
    for launch in (softmax_backward, cooperative_backward):
        with pytest.raises(ValueError, match="out .dx. overlaps y"):
            launch(y.t(), dy, y.view(3, 40))


def test_cooperative_backward_checks_what_softmax_backward_checks():
    from softmax_lab.kernels import cooperative_backward

    y = torch.softmax(randn((4, 64), device=DEV, seed=84), -1)
    dy = randn((4, 64), device=DEV, seed=85)
    want = y * (dy - (y * dy).sum(-1, keepdim=True))
    room = torch.zeros(4, 64, device=DEV)
    with pytest.raises(ValueError, match=r"out \(dx\) must match y: shape \(4, 64\)"):
        cooperative_backward(y, dy, room[:2])  # (it once wrote rows 2-3 of room, outside dx)
    assert not room.any()
    with pytest.raises(ValueError, match="dy has shape"):
        cooperative_backward(y, dy[:2])
    wide = randn((4, 65), device=DEV, seed=86)
    with pytest.raises(ValueError, match="overlaps dy"):
        cooperative_backward(y, wide[:, :64], wide[:, 1:])
    with pytest.raises(ValueError, match="BLOCK"):
        cooperative_backward(y, dy, BLOCK=48)
    near(cooperative_backward(y, dy), want)
    near(cooperative_backward(y, dy, BLOCK=16), want)
    assert cooperative_backward(y[:0], dy[:0]).shape == (0, 64)


@pytest.mark.skipif(DEV.type != "cpu", reason="the CPU interpreter's launches")
def test_a_raw_launcher_under_torch_compile_runs_on_the_cpu():
    # Dynamo once traced Triton's interpreter itself (KeyError(torch.uint64)); the launch is a graph break now.
    from softmax_lab.kernels import fused_softmax, softmax_backward

    x = randn((4, 64), device=DEV, seed=87)
    y, dy = softmax64(x).float(), randn((4, 64), device=DEV, seed=88)
    for backend in ("eager", "aot_eager"):
        torch._dynamo.reset()
        near(torch.compile(lambda t: fused_softmax(t) * 2, backend=backend)(x), softmax64(x) * 2)
        near(torch.compile(lambda a, b: softmax_backward(a, b) + 1, backend=backend)(y, dy),
             y * (dy - (y * dy).sum(-1, keepdim=True)) + 1)
