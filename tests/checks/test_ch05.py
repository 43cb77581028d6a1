"""Chapter 5's exercise checks (the online update, the online kernel): a blank exercise fails with "not implemented",
the solution passes, and each classic mistake fails with a message that names it.

The kernels here are small stand-ins for what a learner writes in the notebook (the solution, and each pitfall
introduced into it); the notebook's own exercise cells are checked too. Sizes stay tiny: these run on the CPU
interpreter in CI.
"""
import math

import softmax_lab  # noqa: F401 - before triton: picks the device (the interpreter on a CPU)
import pytest
import torch
import triton
import triton.language as tl

from check_helpers import (NEG_INF, assert_blank, assert_names, assert_passes, blank,
                           notebook_exercise_blank_says_not_implemented, notebook_exercise_solution_passes)
from softmax_lab.checks import ch05


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
    (update_no_rescale, ["l was not rescaled when the max grew"]),
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
    (_online(rescale=False), ["l was not rescaled when the max grew"]),
    (_online(guard=False), ["exp(-inf - (-inf)) = NaN"]),
])
def test_ch05_kernel_pitfalls(fn, words, capsys):
    assert_names(ch05.check_online_softmax, fn, "ch05-online-kernel", words, capsys)


# ============================================================ the notebooks' own exercise cells, both versions


# (notebook, exercise id, check function, names the check is called with)
NOTEBOOK_EXERCISES = [
    ("05_online_softmax.ipynb", "ch05-online-update", ch05.check_online_update, ["online_update"]),
    ("05_online_softmax.ipynb", "ch05-online-kernel", ch05.check_online_softmax, ["online_softmax"]),
]


@pytest.mark.parametrize("notebook,exercise,check,names", NOTEBOOK_EXERCISES, ids=[e[1] for e in NOTEBOOK_EXERCISES])
def test_notebook_exercise_solution_passes(notebook, exercise, check, names, exercise_module, capsys):
    notebook_exercise_solution_passes(exercise, check, names, exercise_module, capsys)


@pytest.mark.parametrize("notebook,exercise,check,names", NOTEBOOK_EXERCISES, ids=[e[1] for e in NOTEBOOK_EXERCISES])
def test_notebook_exercise_blank_says_not_implemented(notebook, exercise, check, names, exercise_module, capsys):
    notebook_exercise_blank_says_not_implemented(exercise, check, names, exercise_module, capsys)
