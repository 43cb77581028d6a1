"""Exercise ch07-persistent: Triton's persistent ``tl.range`` loop: correct, the grid does not grow with the
rows, every row read once and written exactly once."""
from __future__ import annotations

import numpy as np

from ...device import DEVICE
from .._pitfalls import Verdict, case_values, random_rows
from ..common import Report
from ..judging import KernelJudge, fresh_values, np2, softmax_case
from ._kernels import (NOT_IMPLEMENTED, _counted, _kernel_problem, _not_implemented, _programs_problem,
                       _traffic_problem, fresh_layout)


# The cases, read by the notebook check and by the grader's judge alike: (name, (rows, columns), programs asked
# for, input row step, output row step, values; see _pitfalls.case_values). The check draws the values from fixed
# seeds; the judge draws them, and JUDGE_FRESH more cases, from the grader's seed.
PERSISTENT_CASES = [
    ("random 1x1, 2 programs asked for", (1, 1), 2, None, None, "random"),
    ("random 2x31, 3 programs", (2, 31), 3, None, None, "random"),
    ("random 3x32, 2 programs", (3, 32), 2, None, None, "random"),
    ("random 4x33, 3 programs", (4, 33), 3, None, None, "random"),
    ("random 2x255, 1 program", (2, 255), 1, None, None, "random"),
    ("random 3x257, 2 programs", (3, 257), 2, None, None, "random"),
    ("random 11x20, 4 programs (rows per program differ)", (11, 20), 4, None, None, "random"),
    ("all-negative rows (-1000 and below), 5x3, 2 programs", (5, 3), 2, None, None, "below -1000"),
    ("large values [1000, 1001, 1002], 2 programs", (1, 3), 2, None, None, "[1000, 1001, 1002]"),
    ("strided input and output, 7x10 (rows 16 and 13 apart), 3 programs", (7, 10), 3, 16, 13, "random"),
]
JUDGE_FRESH = 2  # fresh cases in every grader run, besides all the named ones


def fresh_case(rng: np.random.Generator) -> tuple:
    """One random case like PERSISTENT_CASES', from the grader's seed."""
    R, C, progs = int(rng.integers(2, 12)), int(rng.integers(5, 300)), int(rng.integers(1, 5))
    s_in, s_out = fresh_layout(rng, C)
    return f"{R}x{C}, {progs} program(s){', strided' if s_in else ''}", (R, C), progs, s_in, s_out, "random"


def _loop_int_note(fn):
    """``fn`` with a note on an error the CPU's interpreter alone raises: the loop variable of ``tl.range`` is a
    Python int there, so ``.to(tl.int64)`` on it fails (a GPU compiles it to a tensor, where it works)."""
    def run() -> str:
        try:
            return fn()
        except Exception as err:
            text, cause = f"{err}", err.__cause__ or err.__context__
            if "has no attribute 'to'" not in text + f"{cause}":
                raise
            return ("your code raised AttributeError: 'int' object has no attribute 'to' - in the CPU's interpreter "
                    "the loop variable of tl.range is a plain Python int, which has no conversion methods, so the "
                    "conversion your code applies to it fails here (on a GPU the loop variable is a tensor, and "
                    "it compiles)")
    return run


def check_persistent(my_persistent_softmax) -> Verdict:
    """Exercise ch07-persistent: ``my_persistent_softmax(x, out, n_programs)`` launches
    ``min(n_programs, n_rows)`` programs of the learner's ``my_persistent_kernel``, each looping over rows."""
    report = Report("ch07-persistent")
    if _not_implemented(lambda x, out: my_persistent_softmax(x, out, n_programs=2), random_rows((3, 4), 1).to(DEVICE)):
        report.add("your kernel and launcher", NOT_IMPLEMENTED)
        return Verdict(report.show())
    seeds = iter(range(740, 800))
    for i, (name, shape, progs, s_in, s_out, kind) in enumerate(PERSISTENT_CASES):
        values = case_values(kind, shape, next(seeds) if kind in ("random", "below -1000") else 0)
        report.run(name, _loop_int_note(lambda v=values, p=progs, a=s_in, b=s_out, i=i: _kernel_problem(
            lambda x, out: my_persistent_softmax(x, out, n_programs=p), v, a, b, seed=750 + i)))

    def grid() -> str:
        for n_rows in (3, 8, 21):
            x = random_rows((n_rows, 8), 760 + n_rows).to(DEVICE)
            c, _ = _counted(my_persistent_softmax, x, n_programs=3)
            problem = _programs_problem(c, 3, "3 programs asked for, whatever the number of rows")
            if problem:
                if c.programs == n_rows:
                    problem += " - that is one program per row, as in chapter 4: the grid grew with the rows"
                return f"{n_rows} rows: {problem}"
        return ""

    def once() -> str:
        x = random_rows((10, 24), 770).to(DEVICE)
        c, _ = _counted(my_persistent_softmax, x, n_programs=3)
        problem = _traffic_problem(c, x.numel())
        if problem.startswith("some outputs were written"):
            problem += (" - programs took the same rows: their loops stepped by less than the number of programs, "
                        "so their rows overlap")
        return problem

    report.run("memcount 3, 8 and 21 rows, 3 programs asked for: the grid does not grow with the rows",
               _loop_int_note(grid))
    report.run("memcount 10x24, 3 programs: every row read once and written exactly once", _loop_int_note(once))
    return Verdict(report.show())


def _persistent_cases(rng):
    """The grader's launches: every named case and JUDGE_FRESH fresh ones, with values from its seed."""
    out = []
    for name, (R, C), progs, s_in, s_out, kind in PERSISTENT_CASES + [fresh_case(rng) for _ in range(JUDGE_FRESH)]:
        args = ["out", "x", "x_stride", "out_stride", ("int", R), "n"]
        out.append(softmax_case(rng, name, fresh_values(rng, kind, (R, C)), args, np2(C), (progs,),
                                steps=(s_in, s_out), constexprs={"NUM_STAGES": 2}))
    return out


JUDGES = {"ch07-persistent": KernelJudge("my_persistent_kernel", _persistent_cases)}
