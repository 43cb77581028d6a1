"""Mutants of chapter 6: wrong answers that the check of masked attention softmax must catch.

Each mutant is a kernel a learner could write. For the properties the check gained (strided scores and output,
traffic, fp16 accumulation), the test asserts that the mutant passes every case of the check *except* the new
one(s) (so it passed the check as it was before) and that the new case fails with a message that names the
mistake. Sizes stay tiny: the CPU interpreter runs all of it in CI.
"""
import math

import softmax_lab
import pytest
import torch
import triton
import triton.language as tl

from check_helpers import check_output
from mutant_helpers import assert_only_new_cases_fail, assert_passes, fail_lines
from softmax_lab.checks import ch06


# ============================================================================================== ch06-masked

@triton.jit
def _masked_kernel(x_ptr, y_ptr, pad_ptr, x_row_stride, y_row_stride, S, rows_per_batch, BLOCK: tl.constexpr,
                   CAUSAL: tl.constexpr, HAS_PAD: tl.constexpr, BUG: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    q = row % S
    k = tl.arange(0, BLOCK)
    keep = k < S
    if CAUSAL:
        keep = keep & (k <= q)
    if HAS_PAD:
        if BUG == "pad-off-by-one":  # the first key after the padding is masked too
            keep = keep & (k > tl.load(pad_ptr + row // rows_per_batch))
        elif BUG == "pad-short":  # the last padding key is kept
            keep = keep & (k >= tl.load(pad_ptr + row // rows_per_batch) - 1)
        else:
            keep = keep & (k >= tl.load(pad_ptr + row // rows_per_batch))
    x_row = x_ptr + row * x_row_stride
    if BUG == "in-stride":
        x_row = x_ptr + row * S
    if BUG == "load-all":  # reads every score, masks afterwards: right values, more traffic
        x = tl.load(x_row + k, mask=k < S, other=-float("inf")).to(tl.float32)
        x = tl.where(keep, x, -float("inf"))
    else:
        x = tl.load(x_row + k, mask=keep, other=-float("inf")).to(tl.float32)
    m = tl.max(x, axis=0)
    if BUG != "no-max-guard":
        m = tl.where(m == -float("inf"), 0.0, m)
    if BUG == "load-twice":  # loads again for the exponentials
        x = tl.load(x_row + k, mask=keep, other=-float("inf")).to(tl.float32)
    e = tl.exp(x - m)
    if BUG == "half-sum" and x_ptr.dtype.element_ty == tl.float16:  # the sum taken over fp16 copies
        total = tl.sum(e.to(tl.float16), axis=0).to(tl.float32)
    else:
        total = tl.sum(e, axis=0)
    if BUG == "guard-max-only":  # a fully masked row: max guarded, then 0 / 0
        y = e.to(tl.float32) / total
    else:
        y = e.to(tl.float32) / tl.where(total == 0.0, 1.0, total)
    y_row = y_ptr + row * y_row_stride
    if BUG == "out-stride":
        y_row = y_ptr + row * x_row_stride
    if BUG == "store-kept":  # stores only the kept keys: the masked-out keys' zeros are never written
        tl.store(y_row + k, y.to(y_ptr.dtype.element_ty), mask=keep)
    else:
        tl.store(y_row + k, y.to(y_ptr.dtype.element_ty), mask=k < S)


def _masked(bug=""):
    def masked_attention_softmax(scores, out=None, causal=True, left_pad=None):
        B, H, S, _ = scores.shape
        x = scores.reshape(B * H * S, S)
        out = torch.empty(scores.shape, dtype=scores.dtype, device=scores.device) if out is None else out
        y = out.view(B * H * S, S)
        pad = left_pad if left_pad is not None else x
        _masked_kernel[(B * H * S,)](x, y, pad, x.stride(0), y.stride(0), S, H * S,
                                     BLOCK=triton.next_power_of_2(S), CAUSAL=causal,
                                     HAS_PAD=left_pad is not None, BUG=bug)
        return out
    return masked_attention_softmax


def test_masked_solution(capsys):
    assert_passes(ch06.check_masked_softmax, _masked(), "ch06-masked", capsys)


@pytest.mark.parametrize("bug,new_cases,words", [
    ("out-stride", ["strided output"], ["the output has its own row stride"]),
    ("in-stride", ["strided scores"], ["read at another spacing"]),
    ("load-all", ["traffic"], ["read scores that the mask removes"]),
    ("load-twice", ["traffic"], ["read 2 times"]),
])
def test_masked_mutants(bug, new_cases, words, capsys):
    assert_only_new_cases_fail(ch06.check_masked_softmax, _masked(bug), new_cases, words, capsys)


def test_masked_store_kept_only_is_named_not_blamed_on_nan_or_stride(capsys):
    """The review of 2026-12-02: storing only the kept keys was called "exp(-inf - (-inf)) is NaN" on fully masked
    rows (the guard was there: NaN was the unwritten output) and "read at another spacing" on strided scores."""
    ok, out = check_output(ch06.check_masked_softmax, _masked("store-kept"), capsys)
    lines = fail_lines(out)
    assert not ok and lines, out
    assert any("never written" in line for line in lines), out
    for line in lines:
        assert "exp(-inf - (-inf))" not in line and "another spacing" not in line, line


# The review of 2026-12-02: (mutant, words every FAIL line of a case with padding or a fully masked row must hold,
# words no FAIL line may hold). An off-by-one padding mask was blamed on half precision; a guarded max with an
# unguarded division was explained as the unguarded max.
MASKED_DIAGNOSES = [
    ("pad-off-by-one", "one key too many is masked: the first real token got no probability",
     ["half precision", "fp16 ulps"]),
    ("pad-short", "one key too few is masked: the last padding token got probability", ["half precision", "spread"]),
    ("guard-max-only", "the row's sum is 0, and the division then computed 0/0 = NaN", ["-inf - (-inf)"]),
    ("no-max-guard", "x - max computed -inf - (-inf) = NaN", ["0/0"]),
]


@pytest.mark.parametrize("bug,words,never", MASKED_DIAGNOSES, ids=[d[0] for d in MASKED_DIAGNOSES])
def test_masked_feedback_names_the_real_mistake(bug, words, never, capsys):
    ok, out = check_output(ch06.check_masked_softmax, _masked(bug), capsys)
    assert not ok, out
    named = [line for line in fail_lines(out) if "padding" in line or "fully masked" in line]
    assert named and all(words in line for line in named if "traffic" not in line), out
    for line in fail_lines(out):
        assert not any(w in line for w in never), line


def test_masked_half_sum(capsys, monkeypatch):
    """An fp16 sum: chapter 6's row names it. numpy (the interpreter's tl.sum) adds fp16 in fp32, so without the
    emulation that row passes (only the strict 64x64 case's extra rounding gives the mutant away there)."""
    import contextlib

    if softmax_lab.ON_GPU:
        pytest.skip("CPU interpreter emulation")
    ok, out = check_output(ch06.check_masked_softmax, _masked("half-sum"), capsys)
    assert not ok
    assert any("chapter 6's sum" in line and "accumulated in fp16" in line for line in fail_lines(out)), out
    monkeypatch.setattr(ch06.masked, "half_sums_in_half", contextlib.nullcontext)
    ok, out = check_output(ch06.check_masked_softmax, _masked("half-sum"), capsys)
    assert not any("chapter 6's sum" in line for line in fail_lines(out)), out  # the interpreter alone hides it


def test_half_sums_in_half_only_touches_fp16_on_the_cpu():
    """The emulation: tl.sum of fp16 adds in fp16 while it is on, fp32 sums are unchanged, and it is undone."""
    if softmax_lab.ON_GPU:
        pytest.skip("the emulation is CPU-only (kernels compiled for the GPU never reach the interpreter)")
    from triton.runtime import interpreter

    original = interpreter.ReduceOps.sum
    terms = torch.full((4096,), math.exp(-8.0))
    terms[0] = 1.0
    sums = {}

    @triton.jit
    def _sum(x_ptr, out_ptr, BLOCK: tl.constexpr):
        x = tl.load(x_ptr + tl.arange(0, BLOCK))
        tl.store(out_ptr, tl.sum(x, axis=0).to(tl.float32))

    for dt in (torch.float16, torch.float32):
        out = torch.zeros(1)
        with ch06.half_sums_in_half():
            _sum[(1,)](terms.to(dt), out, BLOCK=4096)
        sums[dt] = float(out)
    assert interpreter.ReduceOps.sum is original
    assert sums[torch.float16] == 1.0  # chapter 6's running sum in fp16: every small term rounded away
    assert abs(sums[torch.float32] - 2.3737) < 1e-3
