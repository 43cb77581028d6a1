"""Checks for chapter 1 (scores to probabilities): stable softmax of one row in one program.

``check_stable_row(softmax_row)`` runs the learner's launcher ``softmax_row(x, out)`` on 1-D rows: the
[2, 1, 0] example, the [1000, 1001, 1002] trace, an all-negative row, identical values and random rows of
several lengths. A wrong answer is explained (overflow, only the denominator shifted, not normalized, ...).
"""
from __future__ import annotations

import torch

from ._pitfalls import Verdict, random_rows, softmax_problem
from .common import Report

__all__ = ["check_stable_row", "ROW_CASES"]

ROW_CASES = [
    ("[2, 1, 0]", torch.tensor([2.0, 1.0, 0.0])),
    ("large values [1000, 1001, 1002]", torch.tensor([1000.0, 1001.0, 1002.0])),
    ("all-negative row [-1002, -1001, -1000]", torch.tensor([-1002.0, -1001.0, -1000.0])),
    ("identical values [7, 7, 7, 7]", torch.full((4,), 7.0)),
    ("one value [5]", torch.tensor([5.0])),
    ("random row of 16", random_rows((16,), 1)),
    ("random row of 100", random_rows((100,), 2)),
]


def check_stable_row(softmax_row) -> Verdict:
    """Print PASS/FAIL per row and a summary line; True when all pass."""
    report = Report("ch01-stable-row")
    for name, values in ROW_CASES:
        report.run(name, lambda v=values: softmax_problem(softmax_row, v))
    return Verdict(report.show())


# ------------------------------------------------------------------------------- what the grader launches

def _judge_cases(rng):
    from .judging import np2, softmax_case

    rows = [rng.normal(0, 3, (1, n)) for n in (1, int(rng.integers(2, 32)), int(rng.integers(33, 130)))]
    rows.append(-1000.0 - np.abs(rng.normal(0, 3, (1, int(rng.integers(3, 20))))))
    rows.append(1000.0 + rng.normal(0, 3, (1, int(rng.integers(3, 20)))))
    return [softmax_case(rng, f"row of {x.shape[1]}", x, ["out", "x", "n"], np2(x.shape[1]), (1,)) for x in rows]


def _judges():
    from .judging import KernelJudge

    return {"ch01-stable-row": KernelJudge("softmax_row_kernel", _judge_cases)}


import numpy as np  # noqa: E402

JUDGES = _judges()
