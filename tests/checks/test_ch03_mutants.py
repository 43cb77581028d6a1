"""Mutants of chapter 3's solution (ch03-naive-normalize: predict the naive kernel's loads): wrong formulas a learner
could write, each failing its check with a message that names what it leaves out or counts twice.

``NEW_EXERCISES`` are the formulas of the prediction exercise; ``CAUGHT`` holds the pitfalls the chapter names, so
that every named pitfall has a mutant.
"""
import pytest

from check_helpers import PITFALLS, chapter_rows
from mutant_helpers import named_pitfall_is_caught, new_exercise_mutant_is_killed

SOLUTION = "return rows * cols * (2 * cols + 1)"
BIG = "4096 x 1024, one tile of 1024 (the H200 benchmark's shape)"
TILED = "3 x 7, tiles of 4 (counted by memcount)"

# (exercise, mutant, edits, failing case, words)
NEW_EXERCISES = [
    ("ch03-naive-normalize", "one walk per program", [(SOLUTION, "return rows * cols * (cols + 1)")], BIG,
     "needs the row's max before it can add up"),
    ("ch03-naive-normalize", "the walks counted once per row", [(SOLUTION, "return rows * (2 * cols + 1)")], BIG,
     "no program shares what it read"),
    ("ch03-naive-normalize", "three loads per element (a kernel that shares the max and sum)",
     [(SOLUTION, "return 3 * rows * cols")], BIG, "here no program shares anything"),
    ("ch03-naive-normalize", "one row's programs only", [(SOLUTION, "return cols * (2 * cols + 1)")], BIG,
     "programs of one row only"),
    ("ch03-naive-normalize", "whole tiles, and no own element",
     [(SOLUTION, "return rows * cols * 2 * block * -(-cols // block)")], TILED,
     "and your count is still one load per program short"),
    ("ch03-naive-normalize", "a float that is not a whole number", [(SOLUTION, "return rows * cols * 2.5")],
     "1 x 1, one tile of 1 (counted by memcount)",
     "return a whole number"),
    ("ch03-naive-normalize", "the right count as a float", [(SOLUTION, "return float(rows * cols * (2 * cols + 1))")],
     "1 x 1, one tile of 1 (counted by memcount)", "return a whole number (an int)"),
    ("ch03-naive-normalize", "some other formula, too high", [(SOLUTION, "return rows * cols * (2 * cols + 5)")], BIG,
     "too high"),
    ("ch03-naive-normalize", "some other formula, too low", [(SOLUTION, "return rows * cols * cols")], BIG,
     "too low"),
]

# The pitfalls the chapter names (check_helpers.PITFALLS), and more caught by value (same format)
CAUGHT = chapter_rows(PITFALLS, "ch03")


@pytest.mark.parametrize("ex,mutant,edits,case,words", NEW_EXERCISES, ids=[f"{m[0]}: {m[1]}" for m in NEW_EXERCISES])
def test_new_exercise_mutant_is_killed(ex, mutant, edits, case, words, tmp_path):
    new_exercise_mutant_is_killed(ex, mutant, edits, case, words, tmp_path)


@pytest.mark.parametrize("ex,pitfall,edits,case,words", CAUGHT, ids=[f"{p[0]}: {p[1]}" for p in CAUGHT])
def test_named_pitfall_is_caught(ex, pitfall, edits, case, words, tmp_path):
    """The pitfalls the chapter names that the checks caught before too (by value)."""
    named_pitfall_is_caught(ex, edits, case, words, tmp_path)
