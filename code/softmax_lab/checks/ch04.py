"""Checks for chapter 4 (three kernels to one): predicted memory traffic, and the fused kernel.

``check_traffic(three_pass_traffic, fused_traffic)`` compares the learner's formulas ``f(rows, cols) ->
(elements loaded, elements stored)`` with the counts of the library kernels' real loads and stores
(``softmax_lab.memcount``) on a few small shapes.

``check_fused(fused_softmax)`` runs the learner's launcher ``fused_softmax(x, out)`` on the boundary shapes,
all-negative rows, large values, identical values and strided views (rows further apart than their length).
"""
from __future__ import annotations

import torch
import triton

from ..device import DEVICE
from ..testing import BOUNDARY_SHAPES
from ._pitfalls import Verdict, quiet, random_rows, softmax_problem
from .common import Report, _returned, lane_map_of

__all__ = ["check_fused", "check_traffic", "measured_traffic", "FUSED_CASES"]

# (name, values, row step in memory: None = contiguous)
FUSED_CASES = [
    *[(f"random {r}x{c}", random_rows((r, c), 60 + i), None) for i, (r, c) in enumerate(BOUNDARY_SHAPES)],
    ("all-negative row [-1002, -1001, -1000]", torch.tensor([[-1002.0, -1001.0, -1000.0]]), None),
    ("large values [1000, 1001, 1002]", torch.tensor([[1000.0, 1001.0, 1002.0]]), None),
    ("identical values 2x37", torch.full((2, 37), 7.0), None),
    ("strided view big[:, :1000] of a 4x1100 tensor", random_rows((4, 1000), 70), 1100),
    ("strided view big[:, :5] of a 3x64 tensor", random_rows((3, 5), 71), 64),
]

TRAFFIC_SHAPES = [(1, 4), (3, 5), (2, 16)]


def measured_traffic(kernel_name: str, rows: int, cols: int) -> tuple[int, int]:
    """(elements loaded, elements stored) by a library kernel on a rows x cols input, counted, not computed."""
    from ..kernels import ALL
    from ..memcount import count_calls

    x = random_rows((rows, cols), 0).to(DEVICE)
    with quiet():
        _, c = count_calls(ALL[kernel_name], x)
    return c.loads, c.stores


def _traffic_problem(formula, kernel_name: str, rows: int, cols: int) -> str:
    want = measured_traffic(kernel_name, rows, cols)
    got = formula(rows, cols)
    try:
        got = (int(got[0]), int(got[1]))
    except (TypeError, IndexError, ValueError):
        return "return a pair (elements loaded, elements stored)"
    if got == want:
        return ""
    parts = []
    if got[0] != want[0]:
        parts.append(f"loads: you said {got[0]}, the kernels loaded {want[0]}")
    if got[1] != want[1]:
        parts.append(f"stores: you said {got[1]}, the kernels stored {want[1]}")
    wrong = [(g, w) for g, w in zip(got, want) if g != w]
    if all(g == 4 * w for g, w in wrong):
        hint = " (that is 4x too many: count elements, not bytes)"
    elif kernel_name == "three_pass":
        hint = " (count the per-row max and sum too: each is one element stored and loaded again)"
    elif any(g > w for g, w in wrong):
        hint = (" (masked-off padding lanes are not counted, and max, exponentials and sum stay in registers: "
                "the fused kernel loads each x once and stores each y once)")
    else:
        hint = ""
    return "; ".join(parts) + hint


def check_traffic(three_pass_traffic, fused_traffic) -> Verdict:
    """Print PASS/FAIL per (kernel, shape) and a summary line; True when all pass."""
    report = Report("ch04-traffic")
    for name, formula in (("three_pass", three_pass_traffic), ("fused", fused_traffic)):
        for rows, cols in TRAFFIC_SHAPES:
            report.run(f"{name} on {rows}x{cols}",
                       lambda f=formula, n=name, r=rows, c=cols: _traffic_problem(f, n, r, c))
    return Verdict(report.show())


def lane_launch(fused_softmax):
    """How the lane map (shown after a FAIL) runs the learner's launcher on one small strided input."""
    return lambda x: _returned(fused_softmax(x, out := torch.empty_like(x)), out)


lane_input = None  # the default: 4 rows of 10 inside rows of 14


def check_fused(fused_softmax) -> Verdict:
    """Print PASS/FAIL per case and a summary line; True when all pass."""
    report = Report("ch04-fused", drawing=lane_map_of(lane_launch(fused_softmax)))
    for name, values, step in FUSED_CASES:
        report.run(name, lambda v=values, s=step: softmax_problem(fused_softmax, v, triton.next_power_of_2,
                                                                  strided_cols=s))
    return Verdict(report.show())


# ------------------------------------------------------------------------------- what the grader launches

def three_pass_counts(rows: int, cols: int) -> tuple[int, int]:
    """What the library's three_pass_softmax loads and stores (elements); tests/test_checks_ch00_04.py checks
    it against the counted traffic (memcount)."""
    return 3 * rows * cols + 2 * rows, 2 * rows * cols + 2 * rows


def _traffic_calls(rng):
    from .judging import PCall, expect_equal

    calls = []
    for _ in range(3):
        r, c = int(rng.integers(1, 50)), int(rng.integers(1, 3000))
        calls.append(PCall(f"three_pass on {r}x{c}", "three_pass_traffic", [r, c],
                           expect_equal(list(three_pass_counts(r, c)))))
        calls.append(PCall(f"fused on {r}x{c}", "fused_traffic", [r, c], expect_equal([r * c, r * c])))
    return calls


def _fused_cases(rng):
    from .judging import BIG_STEP, INT64_HINT, gpu_scale, np2, softmax_case, softmax_rows

    args = ["out", "x", "x_stride", "out_stride", "n"]
    out = []
    for R, C in [(1, 1), (2, 31), (3, 32), (4, 33), (2, int(rng.integers(100, 255))), (3, 257)]:
        x = softmax_rows(rng, (R, C))
        out.append(softmax_case(rng, f"{R}x{C}", x, args, np2(C), (R,)))
    for R, C in [(4, int(rng.integers(5, 60))), (3, int(rng.integers(200, 300)))]:
        x = softmax_rows(rng, (R, C))
        out.append(softmax_case(rng, f"strided input and output {R}x{C}", x, args, np2(C), (R,), strided=True))
    x = softmax_rows(rng, (3, 7))
    out.append(softmax_case(rng, "64-bit row offsets", x, args, 8, (3,), strided=True, int64=True,
                            hint=INT64_HINT))
    if gpu_scale():  # last: a fault here may spoil the GPU context for later launches
        out.append(softmax_case(rng, "rows 2**30 apart: offsets past 2**31 elements", softmax_rows(rng, (3, 37)),
                                args, 64, (3,), hint=INT64_HINT, big_step=BIG_STEP))
    return out


def _judges():
    from .judging import KernelJudge, PythonJudge

    return {"ch04-traffic": PythonJudge(_traffic_calls),
            "ch04-fused": KernelJudge("my_fused_kernel", _fused_cases, int64=True)}


JUDGES = _judges()
