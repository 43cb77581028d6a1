"""Chapter 6's exercise check (masked attention softmax): a blank exercise fails with "not implemented", the solution
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

from check_helpers import (assert_blank, assert_names, assert_passes, blank, check_output,
                           notebook_exercise_blank_says_not_implemented, notebook_exercise_solution_passes)
from softmax_lab.checks import ch06


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
    ("exp-fp16", ["tl.exp was given a half-precision tensor", "takes fp32"]),
    ("pad-zero", ["masked positions got probability"]),
    ("ignore-pad", ["left padding ignored"]),
])
def test_ch06_pitfalls(bug, words, capsys):
    assert_names(ch06.check_masked_softmax, _masked(bug), "ch06-masked", words, capsys)


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
    ok, out = check_output(ch06.check_masked_softmax, wrong_batch, capsys)
    assert not ok
    assert any("causal + left padding [0, 5], 2 heads" in line for line in out.splitlines()
               if line.startswith("FAIL")), out  # its own line, or grouped with the other padding cases


# ============================================================ the notebooks' own exercise cells, both versions


# (notebook, exercise id, check function, names the check is called with)
NOTEBOOK_EXERCISES = [
    ("06_half_precision_and_attention.ipynb", "ch06-masked", ch06.check_masked_softmax,
     ["masked_attention_softmax"]),
    ("06_half_precision_and_attention.ipynb", "ch06-attention", ch06.check_attention, ["attention"]),
]


@pytest.mark.parametrize("notebook,exercise,check,names", NOTEBOOK_EXERCISES, ids=[e[1] for e in NOTEBOOK_EXERCISES])
def test_notebook_exercise_solution_passes(notebook, exercise, check, names, exercise_module, capsys):
    notebook_exercise_solution_passes(exercise, check, names, exercise_module, capsys)


@pytest.mark.parametrize("notebook,exercise,check,names", NOTEBOOK_EXERCISES, ids=[e[1] for e in NOTEBOOK_EXERCISES])
def test_notebook_exercise_blank_says_not_implemented(notebook, exercise, check, names, exercise_module, capsys):
    notebook_exercise_blank_says_not_implemented(exercise, check, names, exercise_module, capsys)
