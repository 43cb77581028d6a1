"""No learner exercise cell gives its answer away: the cell carries the signature, the specification and the
tests, and the markdown cell just above it explains, but neither contains a line of the solution.

The rule, for every exercise of the course (the registry's ids, located by their ``exercise:<id>`` tags):

* The answer is the exercise cell's solution regions in ``solutions/`` (between ``### BEGIN SOLUTION`` and
  ``### END SOLUTION``), without the ``# HINT:`` lines (those stay in the learner's cell, so they are checked
  as part of it).
* Every line is normalised: leading and trailing space removed, runs of spaces made one, a trailing
  ``# comment`` after code dropped. A line counts only when it is significant: code of at least 4 tokens and
  12 characters (so ``return out``, ``counts = []``, brackets and ``else:`` never count), or a comment of at
  least 5 words (an explanation that would give the answer away in words).
* The learner's version of the cell (what ``softmax-lab build`` makes of it), normalised the same way, and
  the nearest markdown cell above it (backticks removed, lines joined), must not contain any significant
  line of the answer as a substring. A ``# HINT:`` that restates a line of the answer is caught this way.

Chapters 05-09 are scrubbed on other branches (exb, exc): their cases may fail here without failing the run.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from softmax_lab import hints
from softmax_lab.course import build, notebook
from softmax_lab.course.release import normalise, significant  # one normalisation: this test and the release

ROOT = Path(__file__).resolve().parents[2]


def answer_lines(source: str) -> list[str]:
    lines, inside = [], False
    for raw in source.split("\n"):
        mark = raw.strip()
        if mark == notebook.BEGIN:
            inside = True
        elif mark == notebook.END:
            inside = False
        elif inside and not mark.startswith(notebook.HINT):
            line = normalise(raw)
            if significant(line):
                lines.append(line)
    return lines


def exercises():
    for path in sorted((ROOT / "solutions").glob("*.ipynb")):
        solution = notebook.read(path)
        learner = build.learner_notebook(solution)
        by_id = {notebook.tag_value(c, "exercise:"): k for k, c in enumerate(learner.cells)
                 if notebook.tag_value(c, "exercise:")}
        for cell in solution.cells:
            ident = notebook.tag_value(cell, "exercise:")
            if not ident:
                continue
            k = by_id[ident]
            above = next((learner.cells[j] for j in range(k - 1, -1, -1) if learner.cells[j].cell_type == "markdown"),
                         None)
            yield pytest.param(ident, cell.source, learner.cells[k].source, above.source if above else "",
                               id=ident)


@pytest.mark.parametrize("ident,solution,learner,markdown", list(exercises()))
def test_learner_cell_and_markdown_above_hold_no_line_of_the_answer(ident, solution, learner, markdown):
    answer = answer_lines(solution)
    assert answer, f"{ident}: no significant line in its solution region (is the region empty?)"
    cell = "\n".join(normalise(line) for line in learner.split("\n"))
    text = " ".join(markdown.replace("`", "").split())
    in_cell = [line for line in answer if line in cell]
    in_markdown = [line for line in answer if line in text]
    assert not in_cell, f"{ident}: the learner's cell contains lines of the answer: {in_cell}"
    assert not in_markdown, f"{ident}: the markdown just above the exercise contains lines of the answer: {in_markdown}"


def test_every_registered_exercise_is_in_a_solution_notebook():
    found = {p.values[0] for p in exercises()}
    assert set(hints.read_registry()) <= found


@pytest.mark.parametrize("line,counts", [
    ("return out", False), ("counts = []", False), (")", False), ("else:", False), ("# the max", False),
    ("y = p / tl.sum(p, axis=0)", True), ("mask = cols < n_cols", True),
    ("# 0 padding adds exp(0) = 1 to the sum", True), ("return [True, False, False, False, False]", True),
])
def test_the_rule_for_significant_lines(line, counts):
    assert significant(normalise(line)) is counts


def test_a_hint_restating_the_answer_is_caught():
    solution = "def f(x):\n    ### BEGIN SOLUTION\n    y = p / tl.sum(p, axis=0)\n    ### END SOLUTION\n"
    learner = notebook.strip_solutions(solution.replace("    ### BEGIN SOLUTION\n",
                                                     "    ### BEGIN SOLUTION\n    # HINT: y = p / tl.sum(p, axis=0)\n"))
    cell = "\n".join(normalise(line) for line in learner.split("\n"))
    assert any(line in cell for line in answer_lines(solution))
