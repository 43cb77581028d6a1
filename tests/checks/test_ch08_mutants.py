"""Mutants of chapter 8: wrong answers that the check of the softmax backward kernel must catch.

Each mutant is a kernel a learner could write. For the properties the check gained (fp32 accumulation, traffic),
the test asserts that the mutant passes every case of the check *except* the new one(s) (so it passed the check
as it was before) and that the new case fails with a message that names the mistake. Sizes stay tiny: the CPU
interpreter runs all of it in CI.
"""
import pytest
import torch
import triton
import triton.language as tl

from mutant_helpers import assert_fails_saying, assert_only_new_cases_fail, assert_passes
from softmax_lab.checks import ch08


# ============================================================================================ ch08-backward

@triton.jit
def _backward_kernel(y_ptr, dy_ptr, dx_ptr, y_row_stride, dy_row_stride, dx_row_stride, n_cols,
                     BLOCK: tl.constexpr, BUG: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    if BUG == "no-cast" and y_ptr.dtype.element_ty == tl.float16:  # fp16 never converted: fp16 dot product
        y = tl.load(y_ptr + row * y_row_stride + cols, mask=mask, other=0.0)
        dy = tl.load(dy_ptr + row * dy_row_stride + cols, mask=mask, other=0.0)
    elif BUG == "pad-inf":
        y = tl.load(y_ptr + row * y_row_stride + cols, mask=mask, other=-float("inf")).to(tl.float32)
        dy = tl.load(dy_ptr + row * dy_row_stride + cols, mask=mask, other=-float("inf")).to(tl.float32)
    elif BUG == "one-stride":
        y = tl.load(y_ptr + row * y_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(dy_ptr + row * y_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    else:
        y = tl.load(y_ptr + row * y_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(dy_ptr + row * dy_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    if BUG == "half-dot" and y_ptr.dtype.element_ty != tl.float32:  # fp32 elementwise, the row's sum in half
        dot = tl.sum((dy * y).to(y_ptr.dtype.element_ty), axis=0).to(tl.float32)
    else:
        dot = tl.sum(dy * y, axis=0)
    if BUG == "diagonal":  # only dy_j/dx_j = y_j - y_j**2 of the Jacobian
        dot = 0.0 * dot
        dy = dy * (1.0 - y)
    if BUG == "load-twice":  # y loaded again for dx
        y = tl.load(y_ptr + row * y_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    dx = y * (dy - dot)
    tl.store(dx_ptr + row * dx_row_stride + cols, dx.to(dx_ptr.dtype.element_ty), mask=mask)


def _backward(bug=""):
    def softmax_backward(y, dy, out=None):
        n_rows, n_cols = y.shape
        out = torch.empty(y.shape, dtype=y.dtype, device=y.device) if out is None else out
        _backward_kernel[(n_rows,)](y, dy, out, y.stride(0), dy.stride(0), out.stride(0), n_cols,
                                    BLOCK=triton.next_power_of_2(n_cols), BUG=bug)
        return out
    return softmax_backward


def test_backward_solution(capsys):
    assert_passes(ch08.check_softmax_backward, _backward(), "ch08-backward", capsys)


def test_backward_no_cast_fails(capsys):
    """A kernel that never casts to fp32 passed "float16 2x100 (accumulate in fp32)" before the dy = 1000 case."""
    assert_only_new_cases_fail(ch08.check_softmax_backward, _backward("no-cast"), ["dy = 1000 + noise"],
                               ["accumulated in half precision"], capsys)


def test_backward_half_dot_is_named_as_such(capsys):
    """fp32 products summed in fp16/bf16: only the dy = 1000 rows show it, and they name the reduction (the bf16 case
    of random rows is no longer taken for a formula mistake: the CPU interpreter now adds bf16 values, not bits)."""
    assert_only_new_cases_fail(ch08.check_softmax_backward, _backward("half-dot"), ["dy = 1000 + noise"],
                               ["accumulated in half precision"], capsys)


def test_backward_loads_twice_fails_traffic(capsys):
    assert_only_new_cases_fail(ch08.check_softmax_backward, _backward("load-twice"), ["traffic"],
                               ["y was read 2 times per element"], capsys)


@pytest.mark.parametrize("bug,words", [("pad-inf", ["padding lanes loaded -inf"]),
                                       ("one-stride", ["own row stride"]),
                                       ("diagonal", ["only the diagonal of the Jacobian"])])
def test_backward_named_pitfalls(bug, words, capsys):
    assert_fails_saying(ch08.check_softmax_backward, _backward(bug), words, capsys)
