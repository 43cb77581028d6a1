"""Exercise ch07-multirow: the learner's ``[ROWS, BLOCK]`` kernel, written from scratch: boundary shapes with
padding rows, all-negative rows, strided inputs and outputs, and from ``memcount`` one read and one write per
element in ``cdiv(n_rows, ROWS)`` programs."""
from __future__ import annotations

import numpy as np
import triton

from .. import judging
from ...device import DEVICE
from .._pitfalls import Verdict, case_values, random_rows
from ..common import Report
from ..judging import INT64_HINT, KernelJudge, fresh_values, np2, softmax_case, softmax_rows
from ._kernels import (NOT_IMPLEMENTED, _counted, _kernel_problem, _not_implemented, _programs_problem,
                       _traffic_problem, fresh_layout)


# The cases, read by the notebook check and by the grader's judge alike: (name, (rows, columns), ROWS, input row
# step, output row step, values: see _pitfalls.case_values). The check draws the
# values from fixed seeds; the judge draws them, and JUDGE_FRESH more cases, from the grader's seed.
MULTIROW_CASES = [
    ("random 1x1, ROWS = 2 (one padding row)", (1, 1), 2, None, None, "random"),
    ("random 2x31, ROWS = 4 (two padding rows)", (2, 31), 4, None, None, "random"),
    ("random 3x32, ROWS = 2 (last program has one row)", (3, 32), 2, None, None, "random"),
    ("random 4x33, ROWS = 4", (4, 33), 4, None, None, "random"),
    ("random 2x255, ROWS = 1", (2, 255), 1, None, None, "random"),
    ("random 3x257, ROWS = 2", (3, 257), 2, None, None, "random"),
    ("random 9x20, ROWS = 4 (3 programs)", (9, 20), 4, None, None, "random"),
    ("all-negative rows (-1000 and below), 3x3, ROWS = 4", (3, 3), 4, None, None, "below -1000"),
    ("large values [1000, 1001, 1002], ROWS = 2", (1, 3), 2, None, None, "[1000, 1001, 1002]"),
    ("strided input big[:, :20] of 5x27, ROWS = 2", (5, 20), 2, 27, None, "random"),
    ("strided output: out rows 31 apart, 5x20, ROWS = 2", (5, 20), 2, None, 31, "random"),
    ("strided input and output, 6x10 (rows 16 and 13 apart), ROWS = 4", (6, 10), 4, 16, 13, "random"),
]
JUDGE_FRESH = 2  # fresh cases in every grader run, besides all the named ones


def fresh_case(rng: np.random.Generator) -> tuple:
    """One random case like MULTIROW_CASES', from the grader's seed."""
    R, C, rows = int(rng.integers(2, 10)), int(rng.integers(5, 300)), int(rng.choice([1, 2, 4, 8]))
    s_in, s_out = fresh_layout(rng, C)
    return f"{R}x{C}, ROWS = {rows}{', strided' if s_in else ''}", (R, C), rows, s_in, s_out, "random"


def check_multirow(my_multirow_softmax) -> Verdict:
    """Exercise ch07-multirow: ``my_multirow_softmax(x, out, ROWS)`` launches the learner's
    ``my_multirow_kernel``, ROWS rows per program as one [ROWS, BLOCK] tile."""
    report = Report("ch07-multirow")
    if _not_implemented(lambda x, out: my_multirow_softmax(x, out, ROWS=2), random_rows((2, 4), 1).to(DEVICE)):
        report.add("your kernel and launcher", NOT_IMPLEMENTED)
        return Verdict(report.show())
    seeds = iter(range(700, 800))
    for i, (name, shape, rows, s_in, s_out, kind) in enumerate(MULTIROW_CASES):
        values = case_values(kind, shape, next(seeds) if kind in ("random", "below -1000") else 0)
        report.run(name, lambda v=values, r=rows, a=s_in, b=s_out, i=i: _kernel_problem(
            lambda x, out: my_multirow_softmax(x, out, ROWS=r), v, a, b, seed=720 + i))

    def traffic() -> str:
        x = random_rows((6, 40), 730).to(DEVICE)
        c, _ = _counted(my_multirow_softmax, x, ROWS=4)
        return _traffic_problem(c, x.numel())

    def programs() -> str:
        x = random_rows((9, 16), 731).to(DEVICE)
        for rows in (1, 2, 4, 8, 16):
            c, _ = _counted(my_multirow_softmax, x, ROWS=rows)
            problem = _programs_problem(c, triton.cdiv(9, rows), f"every one of the 9 rows needs a program, {rows} "
                                        "rows to a program" + (", the last one partly padding" if 9 % rows else ""))
            if problem:
                if c.programs == 9 and rows > 1:
                    problem += " - one program per row, whatever ROWS asked for"
                elif c.programs == 9 // rows:
                    problem += " - the grid was rounded down, so the last rows have no program"
                return f"ROWS = {rows}: {problem}"
        return ""

    report.run("memcount 6x40, ROWS = 4: each element read once and written once, nothing else", traffic)
    report.run("memcount 9x16, ROWS = 1, 2, 4, 8, 16: the programs of one launch", programs)
    return Verdict(report.show())


def _multirow_cases(rng):
    """The grader's launches: every named case and JUDGE_FRESH fresh ones with values from its seed, then the
    64-bit offsets (counted in the interpreter; on a GPU, real rows 2**30 apart)."""
    out = []
    for name, (R, C), rows, s_in, s_out, kind in MULTIROW_CASES + [fresh_case(rng) for _ in range(JUDGE_FRESH)]:
        args = ["out", "x", "x_stride", "out_stride", ("int", R), "n"]
        out.append(softmax_case(rng, name, fresh_values(rng, kind, (R, C)), args, np2(C), (triton.cdiv(R, rows),),
                                steps=(s_in, s_out), constexprs={"ROWS": rows}))
    args = ["out", "x", "x_stride", "out_stride", ("int", 3), "n"]
    out.append(softmax_case(rng, "64-bit row offsets", softmax_rows(rng, (3, 7)), args, 8, (2,), strided=True,
                            int64=True, hint=INT64_HINT, constexprs={"ROWS": 2}))
    if judging.gpu_scale():  # last: a fault here may spoil the GPU context for later launches
        out.append(softmax_case(rng, "rows 2**30 apart: offsets past 2**31 elements", softmax_rows(rng, (3, 37)),
                                args, 64, (2,), hint=INT64_HINT, big_step=judging.BIG_STEP, constexprs={"ROWS": 2}))
    return out


JUDGES = {"ch07-multirow": KernelJudge("my_multirow_kernel", _multirow_cases, int64=True)}
