"""Exercise ch07-persistent: Triton's persistent ``tl.range`` loop: correct, the grid does not grow with the
rows, every row read once and written exactly once."""
from __future__ import annotations

import torch

from ...device import DEVICE
from .._pitfalls import Verdict, random_rows
from ..common import Report
from ..judging import KernelJudge, np2, softmax_case, softmax_rows
from ._kernels import NOT_IMPLEMENTED, _counted, _kernel_problem, _not_implemented, _programs_problem, _traffic_problem


PERSISTENT_CASES = [
    ("random 1x1, 2 programs asked for", random_rows((1, 1), 740), 2, None, None),
    ("random 2x31, 3 programs", random_rows((2, 31), 741), 3, None, None),
    ("random 3x32, 2 programs", random_rows((3, 32), 742), 2, None, None),
    ("random 4x33, 3 programs", random_rows((4, 33), 743), 3, None, None),
    ("random 2x255, 1 program", random_rows((2, 255), 744), 1, None, None),
    ("random 3x257, 2 programs", random_rows((3, 257), 745), 2, None, None),
    ("random 11x20, 4 programs (rows per program differ)", random_rows((11, 20), 746), 4, None, None),
    ("all-negative rows (-1000 and below), 5x3, 2 programs", -1000.0 - random_rows((5, 3), 747).abs(), 2, None,
     None),
    ("large values [1000, 1001, 1002], 2 programs", torch.tensor([[1000.0, 1001.0, 1002.0]]), 2, None, None),
    ("strided input and output, 7x10 (rows 16 and 13 apart), 3 programs", random_rows((7, 10), 748), 3, 16, 13),
]


def check_persistent(my_persistent_softmax) -> Verdict:
    """Exercise ch07-persistent: ``my_persistent_softmax(x, out, n_programs)`` launches
    ``min(n_programs, n_rows)`` programs of the learner's ``my_persistent_kernel``, each looping over rows."""
    report = Report("ch07-persistent")
    if _not_implemented(lambda x, out: my_persistent_softmax(x, out, n_programs=2), random_rows((3, 4), 1).to(DEVICE)):
        report.add("your kernel and launcher", NOT_IMPLEMENTED)
        return Verdict(report.show())
    for i, (name, values, progs, s_in, s_out) in enumerate(PERSISTENT_CASES):
        report.run(name, lambda v=values, p=progs, a=s_in, b=s_out, i=i: _kernel_problem(
            lambda x, out: my_persistent_softmax(x, out, n_programs=p), v, a, b, seed=750 + i))

    def grid() -> str:
        for n_rows in (3, 8, 21):
            x = random_rows((n_rows, 8), 760 + n_rows).to(DEVICE)
            c, _ = _counted(my_persistent_softmax, x, n_programs=3)
            problem = _programs_problem(c, 3, "min(n_programs, n_rows) = 3, whatever the number of rows")
            if problem:
                if c.programs == n_rows:
                    problem += " - that is one program per row: launch n_programs and let each loop over rows"
                return f"{n_rows} rows: {problem}"
        return ""

    def once() -> str:
        x = random_rows((10, 24), 770).to(DEVICE)
        c, _ = _counted(my_persistent_softmax, x, n_programs=3)
        problem = _traffic_problem(c, x.numel())
        if problem.startswith("some outputs were written"):
            problem += (" (the loop's step is the number of programs, tl.num_programs(0): program p takes rows p, "
                        "p + step, p + 2 step, ...)")
        return problem

    report.run("memcount 3, 8 and 21 rows, 3 programs asked for: the grid does not grow with the rows", grid)
    report.run("memcount 10x24, 3 programs: every row read once and written exactly once", once)
    return Verdict(report.show())


def _persistent_cases(rng):
    out = []
    for R, C, progs, strided in [(1, 1, 1, False), (2, 31, 1, False), (5, 32, 2, False), (7, 33, 3, False),
                                 (4, int(rng.integers(100, 255)), 3, False), (9, 257, 4, False),
                                 (6, int(rng.integers(5, 60)), 4, True), (5, int(rng.integers(200, 300)), 2, True)]:
        args = ["out", "x", "x_stride", "out_stride", ("int", R), "n"]
        name = f"{'strided input and output ' if strided else ''}{R}x{C}, {progs} program{'s' if progs > 1 else ''}"
        out.append(softmax_case(rng, name, softmax_rows(rng, (R, C)), args, np2(C), (progs,), strided=strided,
                                constexprs={"NUM_STAGES": 2}))
    return out


JUDGES = {"ch07-persistent": KernelJudge("my_persistent_kernel", _persistent_cases)}
