"""Checks for chapter 3 (the naive kernel): the stable normalization each program writes.

``check_naive(naive_softmax)`` runs the learner's launcher ``naive_softmax(x, out)`` on small shapes (the
naive kernel launches one program per element, so the interpreter is slow past a few hundred) and the
classic rows. Typical slips it names: exp(x) in the numerator (output scaled by e^max), no division.
"""
from __future__ import annotations

from ..device import DEVICE
from ._pitfalls import Verdict, case_values, random_rows, softmax_problem, traffic_problem
from .common import Report
from .judging import KernelJudge, fresh_values, np2, softmax_case

__all__ = ["check_naive", "NAIVE_CASES"]

# The cases, read by the notebook check and by the grader's judge alike: (name, (rows, columns), values (see
# _pitfalls.case_values), the check's seed). The check draws the values from the fixed seeds; the judge from the
# grader's seed, plus JUDGE_FRESH fresh shapes.
NAIVE_TABLE = [
    ("random 1x1", (1, 1), "random", 40),
    ("random 2x31", (2, 31), "random", 41),
    ("random 3x32", (3, 32), "random", 42),
    ("random 4x33", (4, 33), "random", 43),
    ("all-negative row [-1002, -1001, -1000]", (1, 3), "[-1002, -1001, -1000]", 0),
    ("large values [1000, 1001, 1002]", (1, 3), "[1000, 1001, 1002]", 0),
    ("identical values 2x7", (2, 7), "sevens", 0),
]
JUDGE_FRESH = 2  # fresh shapes in every grader run, besides all the named ones
NAIVE_CASES = [(name, case_values(kind, shape, seed)) for name, shape, kind, seed in NAIVE_TABLE]  # the check's


TRAFFIC_CASE = ("your own Triton kernel: 2N² + N loads per row of N, one store per program (counted by memcount, "
                "2x5)")


def check_naive(naive_softmax) -> Verdict:
    """Print PASS/FAIL per case and a summary line; True when all pass."""
    report = Report("ch03-naive-normalize")
    for name, values in NAIVE_CASES:
        report.run(name, lambda v=values: softmax_problem(naive_softmax, v))
    x = random_rows((2, 5), 44).to(DEVICE)
    report.run(TRAFFIC_CASE, lambda: traffic_problem(
        naive_softmax, x, 2 * (2 * 5 * 5 + 5), 10, "walk the row twice and load its own element once (the "
        "values loaded are already in `mine`, `row_max` and `total`), then store one value",
        kernel="my_naive_kernel"))
    return Verdict(report.show())


# ------------------------------------------------------------------------------- what the grader launches

def _judge_cases(rng):
    """The grader's launches: every named case with values from its seed, and JUDGE_FRESH fresh shapes."""
    fresh = [(f"random {R}x{C}", (R, C), "random", 0)
             for R, C in ((int(rng.integers(1, 4)), int(rng.integers(3, 40))) for _ in range(JUDGE_FRESH))]
    return [softmax_case(rng, name, fresh_values(rng, kind, (R, C)), ["out", "x", "n"], min(np2(C), 1024), (R * C,))
            for name, (R, C), kind, _ in NAIVE_TABLE + fresh]


def _judges():
    return {"ch03-naive-normalize": KernelJudge("my_naive_kernel", _judge_cases)}


JUDGES = _judges()
