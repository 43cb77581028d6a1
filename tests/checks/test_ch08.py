"""Chapter 8's exercise check (the softmax backward kernel): a blank exercise fails with "not implemented", the solution
passes, and each classic mistake fails with a message that names it.

The kernels here are small stand-ins for what a learner writes in the notebook (the solution, and each pitfall
introduced into it); the notebook's own exercise cells are checked too. Sizes stay tiny: these run on the CPU
interpreter in CI.
"""
import softmax_lab  # noqa: F401 - before triton: picks the device (the interpreter on a CPU)
import pytest
import torch
import triton
import triton.language as tl

from check_helpers import (assert_blank, assert_names, assert_passes, blank,
                           notebook_exercise_blank_says_not_implemented, notebook_exercise_solution_passes)
from softmax_lab.checks import ch08


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
    ("no-sum", ["flows through the shared denominator is missing"]),
    ("sum-dy", ["the plain sum(dy)"]),
    ("sign", ["sign is flipped"]),
    ("no-y", ["factor y is missing"]),
])
def test_ch08_pitfalls(bug, words, capsys):
    assert_names(ch08.check_softmax_backward, _backward(bug), "ch08-backward", words, capsys)


# ============================================================ the notebooks' own exercise cells, both versions


# (notebook, exercise id, check function, names the check is called with)
NOTEBOOK_EXERCISES = [
    ("08_backward.ipynb", "ch08-backward", ch08.check_softmax_backward, ["softmax_backward"]),
]


@pytest.mark.parametrize("notebook,exercise,check,names", NOTEBOOK_EXERCISES, ids=[e[1] for e in NOTEBOOK_EXERCISES])
def test_notebook_exercise_solution_passes(notebook, exercise, check, names, exercise_module, capsys):
    notebook_exercise_solution_passes(exercise, check, names, exercise_module, capsys)


@pytest.mark.parametrize("notebook,exercise,check,names", NOTEBOOK_EXERCISES, ids=[e[1] for e in NOTEBOOK_EXERCISES])
def test_notebook_exercise_blank_says_not_implemented(notebook, exercise, check, names, exercise_module, capsys):
    notebook_exercise_blank_says_not_implemented(exercise, check, names, exercise_module, capsys)
