"""Checks for chapter 2 (masks and padding): a one-row-per-program kernel that loads each row once and stores its
softmax and its mean score.

``check_masked_rows(softmax_rows)`` runs the learner's launcher ``softmax_rows(x, out, mean)`` (2-D, contiguous) on
row lengths around powers of two, the all-negative row in a block of 4, and large values. Outputs are
poisoned and followed by a guard zone, so a missing store mask or a load that runs into the next row is
caught and named. The padding lanes feed three reductions (the max, the sum of exponentials and the sum of the
scores), and no one padding value is the identity of all three: a mean that took the padding in is named.
"""
from __future__ import annotations

import math

import numpy as np
import torch
import triton
import triton.language as tl

from ..testing import BOUNDARY_SHAPES
from ._pitfalls import Verdict, case_values, quiet, random_rows, softmax_problem, traffic_problem
from .common import GUARD, GUARD_LEN, Report, _returned, guarded, lane_map_of
from ..device import DEVICE as _DEVICE
from .judging import Buf, KernelJudge, PCall, PythonJudge, cast, fresh_values, np2, softmax_case, view_of

__all__ = ["check_masked_rows", "MASK_CASES", "check_padding_self_test"]

# The cases, read by the notebook check and by the grader's judge alike: (name, (rows, columns), values (see
# _pitfalls.case_values), the check's seed). The check draws the values from the fixed seeds; the judge from the
# grader's seed, plus JUDGE_FRESH fresh shapes.
MASK_TABLE = [
    ("3 columns in a block of 4 [[1, 2, 3]]", (1, 3), "[1, 2, 3]", 0),
    ("all-negative row [-1002, -1001, -1000]", (1, 3), "[-1002, -1001, -1000]", 0),
    *[(f"random {r}x{c}", (r, c), "random", 20 + i) for i, (r, c) in enumerate(BOUNDARY_SHAPES)],
    ("all-negative rows 3x5", (3, 5), "below -1000", 30),
    ("large values [1000, 1001, 1002]", (1, 3), "[1000, 1001, 1002]", 0),
]
JUDGE_FRESH = 2  # fresh shapes in every grader run, besides all the named ones
MASK_CASES = [(name, case_values(kind, shape, seed)) for name, shape, kind, seed in MASK_TABLE]  # the check's


TRAFFIC_CASE = ("your own Triton kernel loads each element once and stores each output once, and one mean "
                "per row (counted by memcount)")


def lane_launch(softmax_rows):
    """How the lane map (shown after a FAIL) runs the learner's launcher on one input (the means go to a scratch
    tensor: the map draws the rows of x and of the output)."""
    return lambda x: _returned(softmax_rows(x, out := torch.empty_like(x), torch.empty(x.shape[0], device=x.device)),
                               out)


def lane_input():
    """Contiguous rows: this chapter's kernel steps from row to row by n_cols (strides come in chapter 4)."""
    return torch.randn(4, 10, generator=torch.Generator().manual_seed(0)).to(_DEVICE)


MEAN_NEVER = "the row means were never stored (still the poison the check wrote)"
MEAN_NEG_INF = ("the mean is -inf: the padding lanes' -inf went into the sum of the scores, and one -inf makes "
                "the whole sum -inf")
MEAN_NAN = ("the mean is NaN: the padding lanes' -inf met something that made it NaN in the sum of the scores "
            "(-inf times 0 and -inf + inf are both NaN)")
MEAN_BLOCK = ("the mean is the row's sum divided by the block's BLOCK lanes, not by the row's n_cols elements: rows "
              "shorter than their block come out too small in magnitude")
MEAN_PAST = "the kernel wrote past the last row's mean: mean has one element per row"


def mean_problem(mean: torch.Tensor, guard: torch.Tensor, values: torch.Tensor) -> str:
    """'' when ``mean`` holds each row's mean score (float64 reference), else the mistake in words."""
    if bool((guard != GUARD).any()):
        return MEAN_PAST
    got = mean.detach().to(torch.float64).cpu()
    x64 = values.reshape(got.numel(), -1).to(torch.float64)
    want = x64.mean(dim=1)
    if torch.allclose(got, want, rtol=1e-5, atol=1e-5):
        return ""
    if bool((got == GUARD).any()):
        return MEAN_NEVER
    if bool(torch.isneginf(got).any()):
        return MEAN_NEG_INF
    if bool(torch.isnan(got).any()):
        return MEAN_NAN
    if torch.allclose(got, x64.sum(dim=1) / triton.next_power_of_2(x64.shape[1]), rtol=1e-5, atol=1e-5):
        return MEAN_BLOCK
    bad = ~torch.isclose(got, want, rtol=1e-5, atol=1e-5)
    return f"{int(bad.sum())} of {got.numel()} row means differ from the float64 mean of the row's scores"


def case_problem(softmax_rows, values: torch.Tensor) -> str:
    """One case: the softmax first (its pitfalls are named by softmax_problem), then the row means."""
    rows = values.shape[0] if values.dim() == 2 else 1
    flat = guarded(rows, device=_DEVICE)
    mean, guard = flat[:rows], flat[rows:]
    problem = softmax_problem(lambda x, out: softmax_rows(x, out, mean), values, triton.next_power_of_2)
    if problem:
        return problem
    with quiet():
        return mean_problem(mean, guard, values)


def check_masked_rows(softmax_rows) -> Verdict:
    """Print PASS/FAIL per case and a summary line; True when all pass."""
    report = Report("ch02-masked-load-store", drawing=lane_map_of(lane_launch(softmax_rows), lane_input))
    for name, values in MASK_CASES:
        report.run(name, lambda v=values: case_problem(softmax_rows, v))
    x = random_rows((3, 5), 31).to(_DEVICE)
    report.run(TRAFFIC_CASE, lambda: traffic_problem(
        lambda x, out: softmax_rows(x, out, torch.empty(x.shape[0], device=x.device)), x, 15, 15 + 3,
        "load each element once, store each output once and one mean per row, and neither load nor store a "
        "padding lane", kernel="softmax_rows_kernel"))
    return Verdict(report.show())


# ------------------------------------------------------------------ your own self-test: would it catch padding?


SELF_TEST_TOL = 1e-3  # expected outputs may be written with 3-4 decimals
MAX_CASES, MAX_LEN = 16, 64
# (case name, padding value); the first is the correct kernel
PADDINGS = [("a correct kernel (padding -inf) passes every one of your cases", -math.inf),
            ("your cases catch a kernel that pads with 0", 0.0),
            ("your cases catch a kernel that pads with 1", 1.0),
            ("your cases catch a kernel that pads with -1000 (very negative, but not -inf)", -1000.0),
            ("your cases catch a kernel that pads with -2000 (below every row of this chapter)", -2000.0)]
NO_PADDING_LANE = ("none of your rows leaves a padding lane: a row whose length is a power of two (like "
                   "[0, 0, 0, 0] in a block of 4) fills its block, so the padding is never read")


@triton.jit
def padded_row_kernel(out_ptr, in_ptr, n_cols, pad, BLOCK: tl.constexpr):
    """Softmax of one row whose padding lanes read ``pad`` (correct only for pad = -inf)."""
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(in_ptr + cols, mask=mask, other=pad)
    x = x - tl.max(x, axis=0)
    p = tl.exp(x)
    tl.store(out_ptr + cols, p / tl.sum(p, axis=0), mask=mask)


def run_padded(row: list[float], pad: float) -> list[float]:
    """The kernel above on one row (BLOCK = next power of two >= its length)."""
    x = torch.tensor(row, dtype=torch.float32, device=_DEVICE)
    out = torch.empty_like(x)
    padded_row_kernel[(1,)](out, x, x.numel(), pad, BLOCK=triton.next_power_of_2(x.numel()))
    return out.cpu().tolist()


def simulate_padded(row: list[float], pad: float) -> list[float]:
    """What that kernel computes, in float64 (the grader's judge has no kernels)."""
    x = torch.tensor(row, dtype=torch.float32).to(torch.float64).numpy()
    block = triton.next_power_of_2(x.size)
    v = np.concatenate([x, np.full(block - x.size, pad)])
    e = np.exp(v - v.max())
    return (e / e.sum())[: x.size].tolist()


def cases_problem(cases) -> str:
    """'' when ``cases`` is a list of [row, expected] pairs the check can run, else what is malformed."""
    if not isinstance(cases, (list, tuple)) or not 1 <= len(cases) <= MAX_CASES:
        return f"return a list of 1 to {MAX_CASES} cases [row, expected]"
    for k, case in enumerate(cases, 1):
        if not isinstance(case, (list, tuple)) or len(case) != 2:
            return f"case {k} is not a pair [row, expected]"
        row, expected = case
        ok = all(isinstance(v, (list, tuple)) and 1 <= len(v) <= MAX_LEN and all(
            isinstance(t, (int, float)) and not isinstance(t, bool) and math.isfinite(t) for t in v)
            for v in (row, expected))
        if not ok or len(row) != len(expected):
            return (f"case {k}: row and expected must be lists of 1 to {MAX_LEN} finite numbers, of the same "
                    "length")
    return ""


def self_test_problem(cases, pad: float, run) -> str:
    """'' when the self-test behaves right against the kernel padding with ``pad`` (``run(row, pad)``): a correct
    kernel (pad = -inf) passes every case, a wrong one fails at least one."""
    bad = cases_problem(cases)
    if bad:
        return bad
    fails = [k for k, (row, want) in enumerate(cases, 1)
             if any(abs(a - b) > SELF_TEST_TOL for a, b in zip(run(list(row), pad), want))]
    if pad == -math.inf:
        return (f"the correct kernel fails your case {fails[0]}: is its expected output the softmax of its row "
                f"(to {SELF_TEST_TOL:g})?" if fails else "")
    if fails:
        return ""
    if all(len(row) == triton.next_power_of_2(len(row)) for row, _ in cases):
        return NO_PADDING_LANE
    wrong = [k for k, (row, want) in enumerate(cases, 1)
             if any(abs(a - b) > SELF_TEST_TOL for a, b in zip(run(list(row), -math.inf), want))]
    if wrong:
        return (f"a kernel that pads with {pad:g} passes all your cases because your expected output for case "
                f"{wrong[0]} is what that kernel computes, not the softmax of the row: the correct kernel fails it")
    why = (f"every one of your rows has its max so far above {pad:g} that exp({pad:g} - max) is (almost) 0, so "
           "the padding lanes add nothing your expected outputs could notice" if pad <= -1000.0 else
           f"in your rows the padding lanes' exp({pad:g} - max) is too small to move any output past "
           f"{SELF_TEST_TOL:g}, and never becomes the max")
    return f"a kernel that pads with {pad:g} passes all your cases: {why}"


def check_padding_self_test(padding_self_test) -> Verdict:
    """Run the learner's self-test cases against a correct kernel and three that pad wrongly; True when the
    correct one passes every case and each wrong one fails at least one."""
    report = Report("ch02-padding-self-test")
    for name, pad in PADDINGS:
        report.run(name, lambda p=pad: self_test_problem(padding_self_test(), p, run_padded))
    return Verdict(report.show())


# ------------------------------------------------------------------------------- what the grader launches

def _judge_cases(rng):
    """The grader's launches: every named case with values from its seed, and JUDGE_FRESH fresh shapes."""
    fresh = [(f"random {R}x{C}", (R, C), "random", 0)
             for R, C in ((int(rng.integers(1, 4)), int(rng.integers(3, 300))) for _ in range(JUDGE_FRESH))]
    cases = []
    for name, (R, C), kind, _ in MASK_TABLE + fresh:
        case = softmax_case(rng, name, fresh_values(rng, kind, (R, C)), ["out", "x", "n"], np2(C), (R,))
        x = case.buffers["x"]
        ref = view_of(x, cast(x.storage, x.dtype)).mean(axis=1)  # the mean of the values the kernel reads
        case.buffers["mean"] = Buf(np.concatenate([np.full(R, np.nan), np.full(GUARD_LEN, GUARD)]), output=True,
                                   shape=(R,), ref=ref)
        case.args.insert(1, ("buf", "mean"))
        cases.append(case)
    return cases


def _self_test_calls(rng):
    return [PCall(name, "padding_self_test", [], lambda value, p=pad: self_test_problem(value, p, simulate_padded))
            for name, pad in PADDINGS]


def _judges():
    return {"ch02-masked-load-store": KernelJudge("softmax_rows_kernel", _judge_cases),
            "ch02-padding-self-test": PythonJudge(_self_test_calls)}


JUDGES = _judges()
