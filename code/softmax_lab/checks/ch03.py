"""Checks for chapter 3 (the naive kernel): the stable normalization each program writes.

``check_naive(naive_softmax)`` runs the learner's launcher ``naive_softmax(x, out)`` on small shapes (the
naive kernel launches one program per element, so the interpreter is slow past a few hundred) and the
classic rows. Typical slips it names: exp(x) in the numerator (output scaled by e^max), no division.
"""
from __future__ import annotations

import torch

from ..device import DEVICE
from ._pitfalls import Verdict, random_rows, softmax_problem, traffic_problem
from .common import Report
from .judging import KernelJudge, np2, softmax_case, softmax_rows

__all__ = ["check_naive", "NAIVE_CASES"]

NAIVE_CASES = [
    ("random 1x1", random_rows((1, 1), 40)),
    ("random 2x31", random_rows((2, 31), 41)),
    ("random 3x32", random_rows((3, 32), 42)),
    ("random 4x33", random_rows((4, 33), 43)),
    ("all-negative row [-1002, -1001, -1000]", torch.tensor([[-1002.0, -1001.0, -1000.0]])),
    ("large values [1000, 1001, 1002]", torch.tensor([[1000.0, 1001.0, 1002.0]])),
    ("identical values 2x7", torch.full((2, 7), 7.0)),
]


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
    out = []
    for R, C in [(1, 1), (2, int(rng.integers(20, 40))), (3, 32), (2, int(rng.integers(3, 9)))]:
        x = softmax_rows(rng, (R, C))
        out.append(softmax_case(rng, f"{R}x{C}", x, ["out", "x", "n"], min(np2(C), 1024), (R * C,)))
    x = 1000.0 + rng.normal(0, 3, (1, 5))
    out.append(softmax_case(rng, "large values 1x5", x, ["out", "x", "n"], 8, (5,)))
    return out


def _judges():
    return {"ch03-naive-normalize": KernelJudge("my_naive_kernel", _judge_cases)}


JUDGES = _judges()
