"""Checks for chapter 0 (setup): the warm-up kernel that doubles a vector.

``check_double(double)`` runs the learner's launcher ``double(x, out)`` on vectors shorter than, equal to and
longer than one block, and names the usual slips (no mask, nothing stored, wrong values).
"""
from __future__ import annotations

import torch

from ..device import DEVICE
from ._pitfalls import Verdict, GUARD, GUARD_LEN, quiet, random_rows
from .common import Report

__all__ = ["check_double", "Verdict"]  # Verdict: what every chapter 0-4 check returns

SIZES = [1, 5, 64, 100]


def _double_problem(double, n: int, seed: int) -> str:
    values = random_rows((n,), seed).to(DEVICE)
    flat_x = torch.zeros(n + GUARD_LEN, device=DEVICE)
    x = flat_x[:n]
    x.copy_(values)
    flat_out = torch.full((n + GUARD_LEN,), GUARD, device=DEVICE)
    out = flat_out[:n]
    out.fill_(float("nan"))
    with quiet():
        y = double(x, out)
    y = out if y is None else y
    if bool((flat_out[n:] != GUARD).any()):
        return "the kernel wrote past the end of the vector: mask the store (mask=offs < n)"
    if torch.isnan(y).any():
        return "some outputs were never written (still NaN): does the grid cover the whole vector?"
    if not torch.equal(y.cpu(), (2 * values).cpu()):
        if torch.equal(y.cpu(), values.cpu()):
            return "the output equals the input: multiply by 2 before storing"
        return "the output is not 2 * x"
    return ""


def check_double(double) -> Verdict:
    """Print PASS/FAIL per vector length and a summary line; True when all pass."""
    report = Report("ch00-double")
    for i, n in enumerate(SIZES):
        report.run(f"vector of {n}", lambda n=n, i=i: _double_problem(double, n, seed=i))
    return Verdict(report.show())
