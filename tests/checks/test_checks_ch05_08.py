"""The exercise checks of chapters 5-8: a blank exercise fails with "not implemented", the solution passes,
and each classic mistake fails with a message that names it.

The kernels here are small stand-ins for what a learner writes in the notebooks (the solutions, and each
pitfall introduced into them). Sizes stay tiny: these run on the CPU interpreter in CI.
"""
import math

import softmax_lab  # noqa: F401 - before triton: picks the device (the interpreter on a CPU)
import pytest
import torch
import triton
import triton.language as tl

from softmax_lab.checks import ch05, ch06, ch07, ch08

NEG_INF = float("-inf")


def run_check(check, fn, capsys):
    ok = check(fn)
    out = capsys.readouterr().out
    return ok, out


def assert_blank(check, fn, exercise, capsys):
    ok, out = run_check(check, fn, capsys)
    assert not ok
    assert "not implemented yet" in out
    assert out.strip().splitlines()[-1].startswith(f"{exercise}: FAILED (0/")


def assert_passes(check, fn, exercise, capsys):
    ok, out = run_check(check, fn, capsys)
    assert ok, out
    assert "FAIL " not in out
    last = out.strip().splitlines()[-1]
    assert last.startswith(f"{exercise}: PASSED (") and "checks passed)" in last


def assert_names(check, fn, exercise, words, capsys):
    ok, out = run_check(check, fn, capsys)
    assert not ok, out
    assert f"{exercise}: FAILED" in out
    fails = [line for line in out.splitlines() if line.startswith("FAIL ")]
    assert fails, out
    for w in words:
        assert any(w in line for line in fails), f"no FAIL line mentions {w!r}:\n{out}"


def blank(*args, **kwargs):
    raise NotImplementedError("exercise: replace this line with your code")


# ============================================================================================== chapter 5

def update_solution(m, l, tile):
    m_new = max(m, float(tile.max()))
    shift = 0.0 if m_new == NEG_INF else m_new
    return m_new, l * math.exp(m - shift) + float(torch.exp(tile - shift).sum())


def update_no_rescale(m, l, tile):
    m_new = max(m, float(tile.max()))
    shift = 0.0 if m_new == NEG_INF else m_new
    return m_new, l + float(torch.exp(tile - shift).sum())


def update_no_guard(m, l, tile):
    m_new = max(m, float(tile.max()))
    alpha = math.exp(m - m_new) if not (m == m_new == NEG_INF) else float("nan")
    return m_new, l * alpha + float(torch.exp(tile - m_new).sum())


def update_tile_max_only(m, l, tile):
    m_new = float(tile.max())
    return m_new, l * math.exp(m - m_new) + float(torch.exp(tile - m_new).sum())


def test_ch05_update_blank(capsys):
    assert_blank(ch05.check_online_update, blank, "ch05-online-update", capsys)


def test_ch05_update_solution(capsys):
    assert_passes(ch05.check_online_update, update_solution, "ch05-online-update", capsys)


@pytest.mark.parametrize("fn,words", [
    (update_no_rescale, ["rescale l by exp(m - m_new)"]),
    (update_no_guard, ["exp(-inf - (-inf)) = NaN"]),
    (update_tile_max_only, ["largest value seen so far"]),
])
def test_ch05_update_pitfalls(fn, words, capsys):
    assert_names(ch05.check_online_update, fn, "ch05-online-update", words, capsys)


@triton.jit
def _online_kernel(x_ptr, y_ptr, x_row_stride, y_row_stride, n_cols, BLOCK: tl.constexpr,
                   RESCALE: tl.constexpr, GUARD: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * x_row_stride
    y_row = y_ptr + row * y_row_stride
    m = -float("inf")
    l = 0.0
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_row + cols, mask=cols < n_cols, other=-float("inf")).to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, axis=0))
        if GUARD:
            shift = tl.where(m_new == -float("inf"), 0.0, m_new)
        else:
            shift = m_new
        if RESCALE:
            l = l * tl.exp(m - shift) + tl.sum(tl.exp(x - shift), axis=0)
        else:
            l = l + tl.sum(tl.exp(x - shift), axis=0)
        m = m_new
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_row + cols, mask=cols < n_cols, other=-float("inf")).to(tl.float32)
        tl.store(y_row + cols, (tl.exp(x - m) / l).to(y_ptr.dtype.element_ty), mask=cols < n_cols)


def _online(rescale=True, guard=True):
    def launch(x, out=None, BLOCK=32):
        out = torch.empty_like(x) if out is None else out
        _online_kernel[(x.shape[0],)](x, out, x.stride(0), out.stride(0), x.shape[1], BLOCK=BLOCK,
                                      RESCALE=rescale, GUARD=guard)
        return out
    return launch


def test_ch05_kernel_blank(capsys):
    assert_blank(ch05.check_online_softmax, blank, "ch05-online-kernel", capsys)


def test_ch05_kernel_solution(capsys):
    assert_passes(ch05.check_online_softmax, _online(), "ch05-online-kernel", capsys)


@pytest.mark.parametrize("fn,words", [
    (_online(rescale=False), ["rescale l by exp(m - m_new)"]),
    (_online(guard=False), ["exp(-inf - (-inf)) = NaN"]),
])
def test_ch05_kernel_pitfalls(fn, words, capsys):
    assert_names(ch05.check_online_softmax, fn, "ch05-online-kernel", words, capsys)


# ============================================================================================== chapter 6

@triton.jit
def _masked_kernel(x_ptr, y_ptr, pad_ptr, x_row_stride, y_row_stride, S, rows_per_batch, BLOCK: tl.constexpr,
                   CAUSAL: tl.constexpr, HAS_PAD: tl.constexpr, BUG: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    q = row % S
    k = tl.arange(0, BLOCK)
    keep = k < S
    if CAUSAL:
        if BUG == "off-by-one":
            keep = keep & (k < q)
        else:
            keep = keep & (k <= q)
    if HAS_PAD:
        if BUG != "ignore-pad":
            keep = keep & (k >= tl.load(pad_ptr + row // rows_per_batch))
    if BUG == "pad-zero":
        x = tl.load(x_ptr + row * x_row_stride + k, mask=keep, other=0.0).to(tl.float32)
    elif BUG == "exp-fp16":
        x = tl.load(x_ptr + row * x_row_stride + k, mask=keep, other=-float("inf"))
    else:
        x = tl.load(x_ptr + row * x_row_stride + k, mask=keep, other=-float("inf")).to(tl.float32)
    m = tl.max(x, axis=0)
    if BUG != "no-guard":
        m = tl.where(m == -float("inf"), 0.0, m)
    if BUG == "exp-fp16":
        e = tl.exp(x - m.to(x.dtype))
    else:
        e = tl.exp(x - m)
    if BUG == "pad-zero":
        e = tl.where(k < S, e, 0.0)
    s = tl.sum(e, axis=0)
    if BUG == "no-guard":
        y = e / s
    else:
        y = e / tl.where(s == 0.0, 1.0, s)
    tl.store(y_ptr + row * y_row_stride + k, y.to(y_ptr.dtype.element_ty), mask=k < S)


def _masked(bug=""):
    def launch(scores, out=None, causal=True, left_pad=None):
        B, H, S, _ = scores.shape
        x = scores.reshape(-1, S)
        out = torch.empty_like(scores) if out is None else out
        y = out.view(-1, S)
        pad = x if left_pad is None else left_pad
        _masked_kernel[(x.shape[0],)](x, y, pad, x.stride(0), y.stride(0), S, H * S,
                                      BLOCK=triton.next_power_of_2(S), CAUSAL=causal,
                                      HAS_PAD=left_pad is not None, BUG=bug)
        return out
    return launch


def test_ch06_blank(capsys):
    assert_blank(ch06.check_masked_softmax, blank, "ch06-masked", capsys)


def test_ch06_solution(capsys):
    assert_passes(ch06.check_masked_softmax, _masked(), "ch06-masked", capsys)


@pytest.mark.parametrize("bug,words", [
    ("no-guard", ["fully masked row gave NaN"]),
    ("off-by-one", ["causal mask off by one"]),
    ("exp-fp16", ["tl.exp was given a half-precision tensor", ".to(tl.float32)"]),
    ("pad-zero", ["masked positions got probability"]),
    ("ignore-pad", ["left padding ignored"]),
])
def test_ch06_pitfalls(bug, words, capsys):
    assert_names(ch06.check_masked_softmax, _masked(bug), "ch06-masked", words, capsys)


# ============================================================================================== chapter 7

def _bytes(M, N, dtype, reads_only=False, itemsize=None):
    size = itemsize or torch.tensor([], dtype=dtype).element_size()
    return (1 if reads_only else 2) * M * N * size


def _gbps(M, N, dtype, ms, gib=False, seconds=False):
    seconds_taken = ms if seconds else ms * 1e-3
    return _bytes(M, N, dtype) / seconds_taken / (2 ** 30 if gib else 1e9)


def test_ch07_bandwidth_blank(capsys):
    ok = ch07.check_bandwidth(blank, blank)
    out = capsys.readouterr().out
    assert not ok and "not implemented yet" in out
    assert out.strip().splitlines()[-1].startswith("ch07-bandwidth: FAILED (0/")


def test_ch07_bandwidth_solution(capsys):
    assert ch07.check_bandwidth(_bytes, _gbps), capsys.readouterr().out


@pytest.mark.parametrize("bytes_fn,gbps_fn,words", [
    (lambda M, N, dt: _bytes(M, N, dt, reads_only=True), _gbps, ["counted only the reads"]),
    (lambda M, N, dt: _bytes(M, N, dt, itemsize=4), _gbps, ["element is 2 bytes"]),
    (_bytes, lambda M, N, dt, ms: _gbps(M, N, dt, ms, gib=True), ["not 2^30 (GiB)"]),
    (_bytes, lambda M, N, dt, ms: _gbps(M, N, dt, ms, seconds=True), ["milliseconds"]),
])
def test_ch07_bandwidth_pitfalls(bytes_fn, gbps_fn, words, capsys):
    ok = ch07.check_bandwidth(bytes_fn, gbps_fn)
    out = capsys.readouterr().out
    assert not ok
    fails = [line for line in out.splitlines() if line.startswith("FAIL ")]
    for w in words:
        assert any(w in line for line in fails), out


def rows_solution(M, N, n_sms):
    block = triton.next_power_of_2(N)
    rows = 1
    while rows * 2 * block <= ch07.MAX_TILE and triton.cdiv(M, rows * 2) >= ch07.PROGRAMS_PER_SM * n_sms:
        rows *= 2
    return rows


def rows_no_grid(M, N, n_sms):  # ignores the SMs: fills the tile
    return max(1, ch07.MAX_TILE // triton.next_power_of_2(N))


def rows_floor(M, N, n_sms):  # counts programs with M // ROWS
    block = triton.next_power_of_2(N)
    rows = 1
    while rows * 2 * block <= ch07.MAX_TILE and M // (rows * 2) >= ch07.PROGRAMS_PER_SM * n_sms:
        rows *= 2
    return rows


def rows_no_tile_cap(M, N, n_sms):
    rows = 1
    while triton.cdiv(M, rows * 2) >= ch07.PROGRAMS_PER_SM * n_sms:
        rows *= 2
    return rows


def rows_not_pow2(M, N, n_sms):
    return max(1, min(ch07.MAX_TILE // triton.next_power_of_2(N), M // (ch07.PROGRAMS_PER_SM * n_sms)))


def test_ch07_rows_blank(capsys):
    assert_blank(ch07.check_choose_rows, blank, "ch07-rows", capsys)


def test_ch07_rows_solution(capsys):
    assert_passes(ch07.check_choose_rows, rows_solution, "ch07-rows", capsys)


@pytest.mark.parametrize("fn,words", [
    (rows_no_grid, ["some SMs sit idle"]),
    (rows_floor, ["cdiv(M, ROWS)"]),
    (rows_no_tile_cap, ["spill registers"]),
    (rows_not_pow2, ["power of two"]),
])
def test_ch07_rows_pitfalls(fn, words, capsys):
    assert_names(ch07.check_choose_rows, fn, "ch07-rows", words, capsys)


# ============================================================================================== chapter 8

@triton.jit
def _backward_kernel(y_ptr, dy_ptr, dx_ptr, y_row_stride, dy_row_stride, dx_row_stride, n_cols,
                     BLOCK: tl.constexpr, BUG: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    y = tl.load(y_ptr + row * y_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    dy = tl.load(dy_ptr + row * dy_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    if BUG == "no-sum":
        dx = y * dy
    elif BUG == "sum-dy":
        dx = y * (dy - tl.sum(dy, axis=0))
    elif BUG == "sign":
        dx = y * (tl.sum(dy * y, axis=0) - dy)
    elif BUG == "no-y":
        dx = dy - tl.sum(dy * y, axis=0)
    else:
        dx = y * (dy - tl.sum(dy * y, axis=0))
    tl.store(dx_ptr + row * dx_row_stride + cols, dx.to(dx_ptr.dtype.element_ty), mask=mask)


def _backward(bug=""):
    def launch(y, dy, out=None):
        out = torch.empty_like(y) if out is None else out
        M, N = y.shape
        _backward_kernel[(M,)](y, dy, out, y.stride(0), dy.stride(0), out.stride(0), N,
                               BLOCK=triton.next_power_of_2(N), BUG=bug)
        return out
    return launch


def test_ch08_blank(capsys):
    assert_blank(ch08.check_softmax_backward, blank, "ch08-backward", capsys)


def test_ch08_solution(capsys):
    assert_passes(ch08.check_softmax_backward, _backward(), "ch08-backward", capsys)


@pytest.mark.parametrize("bug,words", [
    ("no-sum", ["- sum(dy * y) term is missing"]),
    ("sum-dy", ["you subtracted sum(dy)"]),
    ("sign", ["sign is flipped"]),
    ("no-y", ["factor y is missing"]),
])
def test_ch08_pitfalls(bug, words, capsys):
    assert_names(ch08.check_softmax_backward, _backward(bug), "ch08-backward", words, capsys)


def test_ch06_heads_indexing(capsys):
    """Forgetting the heads when finding a row's batch (rows_per_batch = S) must fail the padding cases."""
    def wrong_batch(scores, out=None, causal=True, left_pad=None):
        B, H, S, _ = scores.shape
        x = scores.reshape(-1, S)
        out = torch.empty_like(scores) if out is None else out
        y = out.view(-1, S)
        pad = x if left_pad is None else torch.cat([left_pad, left_pad.new_zeros(B * H)])
        _masked_kernel[(x.shape[0],)](x, y, pad, x.stride(0), y.stride(0), S, S,
                                      BLOCK=triton.next_power_of_2(S), CAUSAL=causal,
                                      HAS_PAD=left_pad is not None, BUG="")
        return out
    ok, out = run_check(ch06.check_masked_softmax, wrong_batch, capsys)
    assert not ok
    assert any("causal + left padding [0, 5], 2 heads" in line for line in out.splitlines()
               if line.startswith("FAIL")), out  # its own line, or grouped with the other padding cases


# ============================================================ the notebooks' own exercise cells, both versions


# (notebook, exercise id, check function, names the check is called with)
NOTEBOOK_EXERCISES = [
    ("05_online_softmax.ipynb", "ch05-online-update", ch05.check_online_update, ["online_update"]),
    ("05_online_softmax.ipynb", "ch05-online-kernel", ch05.check_online_softmax, ["online_softmax"]),
    ("06_half_precision_and_attention.ipynb", "ch06-masked", ch06.check_masked_softmax,
     ["masked_attention_softmax"]),
    ("07_performance.ipynb", "ch07-bandwidth", ch07.check_bandwidth, ["bytes_moved", "achieved_gbps"]),
    ("07_performance.ipynb", "ch07-rows", ch07.check_choose_rows, ["choose_rows"]),
    ("08_backward.ipynb", "ch08-backward", ch08.check_softmax_backward, ["softmax_backward"]),
]


@pytest.mark.parametrize("notebook,exercise,check,names", NOTEBOOK_EXERCISES, ids=[e[1] for e in NOTEBOOK_EXERCISES])
def test_notebook_exercise_solution_passes(notebook, exercise, check, names, exercise_module, capsys):
    module = exercise_module(exercise)
    assert check(*[getattr(module, n) for n in names]), capsys.readouterr().out
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith(f"{exercise}: PASSED")


@pytest.mark.parametrize("notebook,exercise,check,names", NOTEBOOK_EXERCISES, ids=[e[1] for e in NOTEBOOK_EXERCISES])
def test_notebook_exercise_blank_says_not_implemented(notebook, exercise, check, names, exercise_module, capsys):
    module = exercise_module(exercise, learner=True)
    assert not check(*[getattr(module, n) for n in names])
    out = capsys.readouterr().out
    fails = [line for line in out.splitlines() if line.startswith("FAIL ")]
    assert fails and all("not implemented yet" in line for line in fails), out
    assert out.strip().splitlines()[-1].startswith(f"{exercise}: FAILED (0/")
