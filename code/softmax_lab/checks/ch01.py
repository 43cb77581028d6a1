"""Checks for chapter 1 (scores to probabilities): stable softmax of one row in one program.

``check_stable_row(softmax_row)`` runs the learner's launcher ``softmax_row(x, out)`` on 1-D rows: the
[2, 1, 0] example, the [1000, 1001, 1002] trace, an all-negative row, identical values and random rows of
several lengths. A wrong answer is explained (overflow, only the denominator shifted, not normalized, ...).
"""
from __future__ import annotations

import numpy as np
import torch

from ..device import DEVICE
from ._pitfalls import Verdict, quiet, random_rows, softmax_problem, traffic_problem
from .common import Report
from .judging import KernelJudge, PCall, PythonJudge, np2, softmax_case

__all__ = ["check_stable_row", "ROW_CASES", "check_shift_trace", "check_count_nonfinite", "STEPS"]

ROW_CASES = [
    ("[2, 1, 0]", torch.tensor([2.0, 1.0, 0.0])),
    ("large values [1000, 1001, 1002]", torch.tensor([1000.0, 1001.0, 1002.0])),
    ("all-negative row [-1002, -1001, -1000]", torch.tensor([-1002.0, -1001.0, -1000.0])),
    ("identical values [7, 7, 7, 7]", torch.full((4,), 7.0)),
    ("one value [5]", torch.tensor([5.0])),
    ("random row of 16", random_rows((16,), 1)),
    ("random row of 100", random_rows((100,), 2)),
]


TRAFFIC_CASE = "your own Triton kernel loads each element once and stores each once (counted by memcount)"


def check_stable_row(softmax_row) -> Verdict:
    """Print PASS/FAIL per row and a summary line; True when all pass."""
    report = Report("ch01-stable-row")
    for name, values in ROW_CASES:
        report.run(name, lambda v=values: softmax_problem(softmax_row, v))
    x = random_rows((16,), 3).to(DEVICE)
    report.run(TRAFFIC_CASE, lambda: traffic_problem(
        softmax_row, x, 16, 16, "load each element of the row once and store each output once",
        kernel="softmax_row_kernel"))
    return Verdict(report.show())


# ------------------------------------------------------------------------------- what the grader launches

def _judge_cases(rng):
    rows = [rng.normal(0, 3, (1, n)) for n in (1, int(rng.integers(2, 32)), int(rng.integers(33, 130)))]
    rows.append(-1000.0 - np.abs(rng.normal(0, 3, (1, int(rng.integers(3, 20))))))
    rows.append(1000.0 + rng.normal(0, 3, (1, int(rng.integers(3, 20)))))
    return [softmax_case(rng, f"row of {x.shape[1]}", x, ["out", "x", "n"], np2(x.shape[1]), (1,)) for x in rows]


# --------------------------------------------------------------- [0, 0, 0] versus [1000, 1000, 1000], predicted

STEPS = ["max", "x - max", "exp(x - max)", "sum", "y"]
TRACE_ROWS = {"zeros": [0.0, 0.0, 0.0], "thousands": [1000.0, 1000.0, 1000.0]}
TRACE_TOL = 1e-3  # predictions written with 4 decimals are fine


def true_trace(values) -> list:
    """The stable softmax's steps for one row, in float32 (as a kernel computes them): one entry per STEPS."""
    x = torch.tensor(values, dtype=torch.float32)
    m = x.max()
    p = torch.exp(x - m)
    s = p.sum()
    return [float(m), (x - m).tolist(), p.tolist(), float(s), (p / s).tolist()]


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def trace_mistakes(got, want) -> list[str] | str:
    """The names of the steps where ``got`` differs from ``want`` (a list), or what is malformed (a str)."""
    if not isinstance(got, (list, tuple)) or len(got) != len(STEPS):
        return f"return {len(STEPS)} values, one per entry of STEPS ({', '.join(STEPS)})"
    wrong = []
    for name, g, w in zip(STEPS, got, want):
        if isinstance(w, list):
            if (not isinstance(g, (list, tuple)) or len(g) != len(w) or not all(_number(v) for v in g)):
                return f"the step {name!r} is a row: give it as a list of {len(w)} numbers"
            if any(abs(a - b) > TRACE_TOL for a, b in zip(g, w)):
                wrong.append(name)
        elif not _number(g):
            return f"the step {name!r} is one number"
        elif abs(g - w) > TRACE_TOL * max(1.0, abs(w)):
            wrong.append(name)
    return wrong


def _trace_problem(predicted_trace, row: str) -> str:
    got = trace_mistakes(predicted_trace(row), true_trace(TRACE_ROWS[row]))
    if isinstance(got, str):
        return got
    if got:
        return (f"not what the stable softmax computes at: {', '.join(got)} - work each step out from the one "
                "before it (the stepper above shows the method on [1000, 1001, 1002])")
    return ""


def changes_problem(flags) -> str:
    """'' when ``flags`` says, for each step, correctly whether it differs between the two rows."""
    truth = [a != b for a, b in zip(true_trace(TRACE_ROWS["zeros"]), true_trace(TRACE_ROWS["thousands"]))]
    if not isinstance(flags, (list, tuple)) or len(flags) != len(STEPS) or not all(
            isinstance(f, bool) for f in flags):
        return f"return {len(STEPS)} booleans, one per entry of STEPS: True where the value changes"
    if list(flags) == truth:
        return ""
    said = [n for n, f in zip(STEPS, flags) if f] or ["nothing"]
    return (f"you say {', '.join(said)} change(s) between the rows; put your two traces side by side, step by "
            "step: after the shift, is anything left of the difference between the rows?")


def check_shift_trace(predicted_trace, steps_that_change) -> Verdict:
    """Print PASS/FAIL for each predicted trace and for the list of steps that change; True when all pass."""
    report = Report("ch01-shift-trace")
    report.run("your trace of [0, 0, 0]", lambda: _trace_problem(predicted_trace, "zeros"))
    report.run("your trace of [1000, 1000, 1000]", lambda: _trace_problem(predicted_trace, "thousands"))
    report.run("which steps change between the two rows", lambda: changes_problem(steps_that_change()))
    return Verdict(report.show())


# --------------------------------------------------------------- x, x + 1000, x - 1000: count what is not finite

COUNT_ROWS = [
    ("the chapter's row [2, 1, 0, -1.5]", [2.0, 1.0, 0.0, -1.5]),
    ("a wide row [0, 100, -100]", [0.0, 100.0, -100.0]),
    ("one value [5]", [5.0]),
    ("random row of 16", random_rows((16,), 4).tolist()),
]
SHIFTS = ("x", "x + 1000", "x - 1000")


def nonfinite_counts(values, dtype=torch.float32) -> list[list[int]]:
    """[[textbook, stable] non-finite outputs for x, x + 1000, x - 1000], computed in ``dtype``."""
    x = torch.tensor(values, dtype=dtype)
    out = []
    for row in (x, x + 1000, x - 1000):
        with quiet():
            textbook = torch.exp(row) / torch.exp(row).sum()
            p = torch.exp(row - row.max())
            stable = p / p.sum()
        out.append([int((~torch.isfinite(textbook)).sum()), int((~torch.isfinite(stable)).sum())])
    return out


def counts_problem(got, values) -> str:
    """'' when ``got`` holds the right counts for the row ``values``; else which row and formula is wrong."""
    want = nonfinite_counts(values)
    if not isinstance(got, (list, tuple)) or len(got) != 3 or not all(
            isinstance(p, (list, tuple)) and len(p) == 2 and all(_number(v) and float(v) == int(v) for v in p)
            for p in got):
        return "return three pairs of counts [textbook, stable], for x, x + 1000 and x - 1000"
    got = [[int(a), int(b)] for a, b in got]
    if got == want:
        return ""
    if got == nonfinite_counts(values, torch.float64):
        return ("these are float64's counts, not float32's: float64's exp overflows only past 709.8, float32's "
                "already past 88.72")
    parts = []
    stable = [name for name, g, w in zip(SHIFTS, got, want) if g[1] != w[1]]
    textbook = [name for name, g, w in zip(SHIFTS, got, want) if g[0] != w[0]]
    if stable:
        parts.append(f"your stable count is wrong for {', '.join(stable)} (after subtracting the row max no "
                     "exponential overflows and the largest is exactly 1: does your stable version subtract it?)")
    if textbook:
        parts.append(f"your textbook count is wrong for {', '.join(textbook)} (float32's exp is inf past 88.72 and "
                     "0 below about -104; then inf/inf and 0/0 are NaN)")
    return "; ".join(parts) + " (inf and NaN both count as not finite)"


def check_count_nonfinite(count_nonfinite) -> Verdict:
    """Print PASS/FAIL per row and a summary line; True when all pass."""
    report = Report("ch01-count-nonfinite")
    for name, values in COUNT_ROWS:
        x = torch.tensor(values, dtype=torch.float32)
        report.run(name, lambda x=x, v=values: counts_problem(count_nonfinite(x.clone()), v))
    return Verdict(report.show())


# ------------------------------------------------------------------------------------------- their judges

def _expect_trace(row: str):
    def problem(value) -> str:
        got = trace_mistakes(value, true_trace(TRACE_ROWS[row]))
        return got if isinstance(got, str) else (f"wrong at: {', '.join(got)}" if got else "")
    return problem


def _shift_calls(rng):
    return [PCall("trace of [0, 0, 0]", "predicted_trace", ["zeros"], _expect_trace("zeros")),
            PCall("trace of [1000, 1000, 1000]", "predicted_trace", ["thousands"], _expect_trace("thousands")),
            PCall("which steps change", "steps_that_change", [], changes_problem)]


def _count_calls(rng):
    rows = [[float(v) for v in rng.normal(0, 3, int(rng.integers(2, 12)))],
            [float(rng.uniform(89, 300)), 0.0, float(-rng.uniform(10, 300))],
            [float(rng.normal(0, 1))]]
    return [PCall(f"row of {len(r)}", "count_nonfinite", [{"tensor": r, "tensor_dtype": "float32"}],
                  lambda value, r=r: counts_problem(value, torch.tensor(r, dtype=torch.float32).tolist()))
            for r in rows]


def _judges():
    return {"ch01-stable-row": KernelJudge("softmax_row_kernel", _judge_cases),
            "ch01-shift-trace": PythonJudge(_shift_calls),
            "ch01-count-nonfinite": PythonJudge(_count_calls)}


JUDGES = _judges()
