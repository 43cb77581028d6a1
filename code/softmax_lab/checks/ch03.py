"""Checks for chapter 3 (the naive kernel): predict its loads before the chapter counts them.

``check_naive(naive_loads)`` asks the learner's formula ``naive_loads(rows, cols, block)`` for the elements the naive
kernel (one program per output, its row walked twice in tiles of ``block`` lanes) loads from memory, and compares it
with memcount's count of that kernel on small inputs (the library's ``naive_softmax``: the same walks as the
notebook's kernel) and with the exact count on big ones, which no interpreter could run. A wrong formula is named by
what it leaves out or counts twice (its own element, the masked lanes of the last tile, one walk per row ...).
"""
from __future__ import annotations

import numbers

import torch

from ..device import DEVICE
from ._pitfalls import Verdict, quiet, random_rows
from .common import Report
from .judging import PCall, PythonJudge, np2

__all__ = ["check_naive", "NAIVE_TABLE", "naive_load_count"]

# ch03-naive-normalize's cases, read by the notebook check and by the grader's judge alike: (name, rows, cols,
# block, counted). The check counts the "counted" ones with memcount; the others, and the judge's JUDGE_FRESH fresh
# shapes, get naive_load_count (which the counted cases check against memcount, tests/checks/test_ch03.py).
NAIVE_TABLE = [
    ("1 x 1, one tile of 1 (counted by memcount)", 1, 1, 1, True),
    ("2 x 5, one tile of 8 (counted by memcount)", 2, 5, 8, True),
    ("3 x 7, tiles of 4 (counted by memcount)", 3, 7, 4, True),
    ("1 x 16, tiles of 4 (counted by memcount)", 1, 16, 4, True),
    ("100 x 1000, one tile of 1024", 100, 1000, 1024, False),
    ("4096 x 1024, one tile of 1024 (the H200 benchmark's shape)", 4096, 1024, 1024, False),
    ("1024 x 4096, tiles of 1024", 1024, 4096, 1024, False),
]
JUDGE_FRESH = 3  # fresh shapes in every grader run, besides all the named ones


def naive_load_count(rows: int, cols: int) -> int:
    """The elements the naive kernel loads: what memcount counts (lanes whose mask is true)."""
    return rows * cols * (2 * cols + 1)


def counted_loads(rows: int, cols: int, block: int) -> int:
    """memcount's count of the library's naive kernel on a rows x cols input, walking its rows in tiles of block."""
    from ..kernels import naive_softmax
    from ..memcount import count_calls

    x = random_rows((rows, cols), 50).to(DEVICE, torch.float32)
    with quiet():  # memcount's note that it counts in the interpreter on a GPU
        _, c = count_calls(lambda t: naive_softmax(t, BLOCK=block), x)
    return c.loads


def loads_problem(value, rows: int, cols: int, block: int, want: int | None = None) -> str:
    """'' when ``value`` is the naive kernel's load count for (rows, cols, block), else the mistake in words."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):  # a count of elements is an int
        return f"return a whole number (an int) of loaded elements (got {type(value).__name__} {value!r:.40})"
    value = int(value)
    want = naive_load_count(rows, cols) if want is None else want
    if value == want:
        return ""
    tiles = -(-cols // block)
    padded = [  # only where the last tile has masked lanes
        (rows * cols * (2 * tiles * block + 1),
         "you counted the masked lanes of the last tile as loads: a lane whose mask is false reads nothing from "
         "memory"),
        (rows * cols * (2 * tiles * block),
         "you counted the masked lanes of the last tile as loads (a lane whose mask is false reads nothing), and "
         "your count is still one load per program short of what the kernel reads"),
    ] if tiles * block != cols else []
    shapes = padded + [  # (a wrong formula's count, its mistake): named only when no other one gives that count
        (rows * cols * 2 * cols, "your count is one load per program short: a program reads more than its walks "
                                 "over the row"),
        (rows * cols * (cols + 1),
         "you counted one walk over the row per program: a program needs the row's max before it can add up "
         "exp(x - max), and keeps no row in registers between the two"),
        (cols * (2 * cols + 1),
         "you counted the programs of one row only: the grid has a program for every element of every row"),
        (rows * (2 * cols + 1),
         "you counted each row's walks once per row, but no program shares what it read: every program of the row "
         "walks the whole row itself"),
        (3 * rows * cols,
         "that is a kernel whose programs share the row's max and sum; here no program shares anything: every "
         "program of the row walks the whole row itself"),
    ]
    named = {why for count, why in shapes if count == value}
    if len(named) == 1:
        return named.pop()
    if value > want:
        return "your count is too high: it holds loads the kernel never makes"
    return "your count is too low: each program's walks and its own element are not all in it"


def check_naive(naive_loads) -> Verdict:
    """Print PASS/FAIL per case of NAIVE_TABLE and a summary line; True when all pass."""
    report = Report("ch03-naive-normalize")
    for name, rows, cols, block, counted in NAIVE_TABLE:
        def problem(r=rows, c=cols, b=block, counted=counted):
            value = naive_loads(r, c, b)  # the learner's formula first: a blank one says "not implemented"
            return loads_problem(value, r, c, b, counted_loads(r, c, b) if counted else None)
        report.run(name, problem)
    return Verdict(report.show())


# ------------------------------------------------------------------------------- what the grader asks

def _calls(rng):
    """NAIVE_TABLE's shapes, and JUDGE_FRESH fresh ones (some walked in several tiles) from the grader's seed."""
    fresh = []
    for _ in range(JUDGE_FRESH):
        rows, cols = int(rng.integers(1, 5000)), int(rng.integers(2, 9000))
        block = min(np2(cols), 1 << int(rng.integers(2, 11)))
        fresh.append((f"{rows} x {cols}, tiles of {block} (fresh)", rows, cols, block, False))
    return [PCall(name, "naive_loads", [r, c, b], lambda value, r=r, c=c, b=b: loads_problem(value, r, c, b))
            for name, r, c, b, _ in NAIVE_TABLE + fresh]


def _judges():
    return {"ch03-naive-normalize": PythonJudge(_calls)}


JUDGES = _judges()
