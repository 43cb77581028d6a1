"""Checks for chapter 0 (setup): the warm-up kernel that doubles a vector.

``check_double(double)`` runs the learner's launcher ``double(x, out)`` on vectors shorter than, equal to and
longer than one block, and names the usual slips (no mask, nothing stored, wrong values).
"""
from __future__ import annotations

import numpy as np
import torch

from ..device import DEVICE
from ._pitfalls import Verdict, quiet, random_rows, traffic_problem
from .common import GUARD, GUARD_LEN, Report, guarded
from .judging import Buf, KCase, KernelJudge, cast

__all__ = ["check_double", "Verdict"]  # Verdict: what every chapter 0-4 check returns

# The cases, read by the notebook check and by the grader's judge alike: vector lengths around one block of 64
# (the check draws each vector from a fixed seed; the judge from the grader's seed, plus JUDGE_FRESH fresh lengths).
SIZES = [1, 5, 64, 100]
JUDGE_FRESH = 2


def fresh_size(rng: np.random.Generator) -> int:
    """One random vector length, from the grader's seed."""
    return int(rng.integers(2, 200))
TRAFFIC_CASE = "your own Triton kernel loads each element once and stores each once (counted by memcount)"


def _double_problem(double, n: int, seed: int) -> str:
    values = random_rows((n,), seed).to(DEVICE)
    flat_x = torch.zeros(n + GUARD_LEN, device=DEVICE)
    x = flat_x[:n]
    x.copy_(values)
    flat_out = guarded(n, device=DEVICE)
    out = flat_out[:n]
    out.fill_(float("nan"))
    with quiet():
        y = double(x, out)
    y = out if y is None else y
    if bool((flat_out[n:] != GUARD).any()):
        return ("the kernel wrote past the end of the vector: the store is not masked, so the last block's lanes "
                "past n wrote into memory the output does not own")
    if torch.isnan(y).any():
        return ("some outputs were never written (still NaN): the grid does not cover the whole vector, or the store "
                "skipped some lanes")
    if not torch.equal(y.cpu(), (2 * values).cpu()):
        if torch.equal(y.cpu(), values.cpu()):
            return "the output equals the input: the kernel stored x itself, not twice its values"
        return "the output is not 2 * x"
    return ""


def check_double(double) -> Verdict:
    """Print PASS/FAIL per vector length and a summary line; True when all pass."""
    report = Report("ch00-double")
    for i, n in enumerate(SIZES):
        report.run(f"vector of {n}", lambda n=n, i=i: _double_problem(double, n, seed=i))
    x = random_rows((100,), 9).to(DEVICE)
    report.run(TRAFFIC_CASE, lambda: traffic_problem(
        double, x, 100, 100, "load each element of x once and store each element of out once",
        wrong=lambda y, x: "" if torch.equal(y.cpu(), (2 * x).cpu()) else "the output is not 2 * x",
        kernel="double_kernel"))
    return Verdict(report.show())


# ------------------------------------------------------------------------------- what the grader launches

def _judge_cases(rng):
    """The grader's launches: every named length and JUDGE_FRESH fresh ones, values from its seed."""
    cases = []
    for n in SIZES + [fresh_size(rng) for _ in range(JUDGE_FRESH)]:
        x = cast(rng.normal(0, 3, n + 64), "float32")
        out = np.full(n + GUARD_LEN, GUARD)
        out[:n] = np.nan
        cases.append(KCase(f"vector of {n}", ((n + 63) // 64,), [("buf", "out"), ("buf", "x"), ("int", n)],
                           {"x": Buf(x), "out": Buf(out, output=True, shape=(n,), ref=2 * x[:n])}, {"BLOCK": 64}))
    return cases


def _judges():
    return {"ch00-double": KernelJudge("double_kernel", _judge_cases)}


JUDGES = _judges()
