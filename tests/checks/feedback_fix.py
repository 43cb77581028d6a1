"""Feedback names the mistake, never the fix: a FAIL message must not quote the exercise's solution.

The fix is what the hint ladder is for (and every hint level shown is recorded). A message "quotes the solution"
when it holds a run of ``RUN`` tokens of a line of the exercise's solution region (normalised as the class edition's
answer search does, quotes made alike) that the learner's blank cell does not already show.
"""
from __future__ import annotations

import re
from functools import cache

from softmax_lab.course import build, notebook, release

from conftest import SOLUTIONS

RUN = 6  # tokens: "other = float ( ' -" is a fix; "the row max" is not code
TOKEN = re.compile(r"\w+|[^\w\s]")


def tokens(text: str) -> list[str]:
    return TOKEN.findall(text.replace('"', "'").replace("`", ""))


def runs(text: str) -> set[tuple[str, ...]]:
    toks = tokens(text)
    return {tuple(toks[i:i + RUN]) for i in range(len(toks) - RUN + 1)}


def _cell(nb, ident: str):
    cells = [c for c in nb.cells if notebook.tag_value(c, notebook.EXERCISE) == ident]
    return cells[0].source if len(cells) == 1 else ""


@cache
def solution_runs(ident: str) -> frozenset[tuple[str, ...]]:
    """The token runs of exercise ``ident``'s solution lines that its blank cell does not show."""
    from softmax_lab import course

    exercise = course.exercise(ident)
    if exercise is None:
        return frozenset()
    path = next(SOLUTIONS.glob(f"{exercise.chapter}_*.ipynb"))
    nb = notebook.read(path)
    solution = _cell(nb, ident)
    blank = _cell(build.learner_notebook(nb), ident)
    lines, inside = [], False
    for raw in solution.split("\n"):
        mark = raw.strip()
        if mark in (notebook.BEGIN, notebook.END):
            inside = mark == notebook.BEGIN
        elif inside and not mark.startswith(notebook.HINT):
            line = release.normalise(raw)
            if release.significant(line):
                lines.append(line)
    given = runs(blank)
    return frozenset(r for line in lines for r in runs(line) if r not in given)


def quoted_fix(ident: str, message: str) -> str:
    """'' when ``message`` quotes no solution line of ``ident``, else the quoted tokens."""
    found = runs(message) & solution_runs(ident)
    return " ".join(sorted(found)[0]) if found else ""
