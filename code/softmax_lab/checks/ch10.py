"""Checks for chapter 10, long rows: ``ch10-schedule``, will a launch of cooperating programs finish?

``finishes(resident, n_chunks, start_order, tickets)`` plays the GPU's scheduler: it starts programs in
``start_order`` while fewer than ``resident`` run, each program's work item is its ``program_id`` (or, with
``tickets``, the number of programs started before it), item ``w`` is chunk ``w % n_chunks`` of row
``w // n_chunks``, and a program finishes once every chunk of its row has been taken by a started program. The
cases are small launches that finish or hang; the grader's judge draws fresh ones.
"""
from __future__ import annotations

import numpy as np

from ._pitfalls import Verdict
from .common import Report
from .judging import PCall, PythonJudge

__all__ = ["check_schedule", "SCHEDULE_CASES", "finishes_rule"]

# (what, resident, n_chunks, start_order, tickets)
SCHEDULE_CASES = [
    ("2 rows of 2 chunks, room for 2, started in program order, by program_id", 2, 2, [0, 1, 2, 3], False),
    ("room for 2, started 0, 2, 1, 3, by program_id", 2, 2, [0, 2, 1, 3], False),
    ("room for 2, started 0, 2, 1, 3, with tickets", 2, 2, [0, 2, 1, 3], True),
    ("room for 1, rows of 2 chunks, with tickets", 1, 2, [0, 1], True),
    ("room for 3, 3 rows of 2, started last to first, by program_id", 3, 2, [5, 4, 3, 2, 1, 0], False),
    ("room for 3, 2 rows of 3, started 0, 3, 1, 4, 2, 5, by program_id", 3, 3, [0, 3, 1, 4, 2, 5], False),
    ("room for 3, 2 rows of 3, started 0, 3, 1, 4, 2, 5, with tickets", 3, 3, [0, 3, 1, 4, 2, 5], True),
    ("room for 1, rows of 1 chunk (no partners), started 2, 0, 1", 1, 1, [2, 0, 1], False),
    ("room for 4, 2 rows of 4, started 4, 0, 5, 1, 6, 2, 7, 3, by program_id", 4, 4, [4, 0, 5, 1, 6, 2, 7, 3], False),
]


def run_schedule(resident: int, n_chunks: int, start_order: list[int], tickets: bool) -> tuple[bool, str]:
    """(whether every program finishes, the state it stops in when it does not)."""
    queue, running, started = list(start_order), [], 0
    taken: dict[int, int] = {}  # row -> chunks taken by started programs
    while queue or running:
        while queue and len(running) < resident:
            pid = queue.pop(0)
            row = (started if tickets else pid) // n_chunks
            started += 1
            taken[row] = taken.get(row, 0) + 1
            running.append((pid, row))
        still = [(pid, row) for pid, row in running if taken[row] < n_chunks]
        if len(still) == len(running):
            stuck = ", ".join(f"program {pid} (row {row}, {taken[row]} of {n_chunks} chunks taken)"
                              for pid, row in running)
            return False, (f"after {started} programs started, every running program waits: {stuck}; "
                           f"no room is left for the programs still to start")
        running = still
    return True, ""


def finishes_rule(resident: int, n_chunks: int, start_order: list[int], tickets: bool) -> bool:
    return run_schedule(resident, n_chunks, start_order, tickets)[0]


def _problem(got, resident, n_chunks, order, tickets) -> str:
    if not isinstance(got, (bool, np.bool_)):
        return f"finishes returned {got!r}: return True or False"
    want, stuck = run_schedule(resident, n_chunks, order, tickets)
    if bool(got) == want:
        return ""
    if want:
        how = ("with tickets, the programs that start first take the first row's chunks, whatever their ids"
               if tickets else "every running program's row gets all its chunks taken in time")
        return f"said it hangs, but every program finishes: {how}"
    return f"said it finishes, but it hangs: {stuck}"


def check_schedule(finishes) -> Verdict:
    """Exercise ch10-schedule: ``finishes(resident, n_chunks, start_order, tickets) -> bool``."""
    report = Report("ch10-schedule")
    for what, resident, n_chunks, order, tickets in SCHEDULE_CASES:
        report.run(what, lambda r=resident, g=n_chunks, o=order, t=tickets:
                   _problem(finishes(r, g, list(o), t), r, g, o, t))
    return Verdict(report.show())


def fresh_cases(rng: np.random.Generator, n: int = 20) -> list[tuple]:
    """``n`` random launches from the grader's seed: rows of 2-5 chunks, rooms from one short of a row to one short
    of the launch, start orders at random, one chunk of each row in turn, or row by row in a random row order;
    tickets or not at random. (Six small launches let a rule of thumb through two times in three; twenty of
    these, about one time in 700.)"""
    out = []
    for k in range(n):
        n_chunks, rows = int(rng.integers(2, 6)), int(rng.integers(2, 6))
        total = n_chunks * rows
        resident = int(rng.integers(n_chunks - 1, total))
        if k % 3 == 0:
            order = rng.permutation(total)
        elif k % 3 == 1:  # one chunk of each row in turn
            order = [r * n_chunks + c for c in range(n_chunks) for r in rng.permutation(rows)]
        else:  # row by row, the rows in a random order
            order = [r * n_chunks + c for r in rng.permutation(rows) for c in rng.permutation(n_chunks)]
        out.append((f"fresh launch {k + 1}", resident, n_chunks, [int(p) for p in order], bool(rng.integers(2))))
    return out


def _calls(rng):
    return [PCall(f"{what}: finishes({r}, {g}, {o}, {t})", "finishes", [r, g, o, t],
                  lambda got, r=r, g=g, o=o, t=t: _problem(got, r, g, o, t))
            for what, r, g, o, t in SCHEDULE_CASES + fresh_cases(rng)]


JUDGES = {"ch10-schedule": PythonJudge(_calls)}
