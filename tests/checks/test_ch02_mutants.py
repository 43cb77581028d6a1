"""Mutants of chapter 2's solutions: wrong answers a learner could write, each failing its check with a message that
names the mistake.

``MISSED_BEFORE`` are wrong answers the check used to pass: for each, every case the old check had still
passes, and only a case that checks the property the chapter teaches kills it. ``CAUGHT`` holds the pitfalls
the chapter names (caught by value), so that every named pitfall has a mutant.
"""
import pytest

from check_helpers import PITFALLS, chapter_rows
from mutant_helpers import (mutant_passed_the_old_cases_and_is_killed_now, named_pitfall_is_caught,
                            new_exercise_mutant_is_killed)
from softmax_lab.checks import ch02

# Wrong answers the check used to pass, before it checked the property the chapter teaches:
# (exercise, mutant, (old, new) edits of the solution, the case that must fail, words its line must hold)
MISSED_BEFORE = [
    ("ch02-masked-load-store", "torch.softmax inside the launcher",
     [("    softmax_rows_kernel[(n_rows,)](out, mean, x, n_cols, BLOCK=triton.next_power_of_2(n_cols))",
       "    out.copy_(torch.softmax(x, dim=-1))\n    mean.copy_(x.mean(dim=-1))")], ch02.TRAFFIC_CASE,
     "never launched softmax_rows_kernel"),
]

# Its newer exercises: (exercise, mutant, edits, failing case, words)
NEW_EXERCISES = [
    ("ch02-masked-load-store", "the mean sums the -inf padding", [("scores = tl.where(mask, x, 0.0)", "scores = x")],
     "3 columns in a block of 4 [[1, 2, 3]]", "the mean is -inf"),
    ("ch02-masked-load-store", "the mask multiplied in (-inf * 0)",
     [("scores = tl.where(mask, x, 0.0)", "scores = x * mask")], "3 columns in a block of 4 [[1, 2, 3]]",
     "the mean is NaN"),
    ("ch02-masked-load-store", "the mean divided by BLOCK",
     [("tl.sum(scores, axis=0) / n_cols)", "tl.sum(scores, axis=0) / BLOCK)")],
     "3 columns in a block of 4 [[1, 2, 3]]", "divided by the block's BLOCK lanes"),
    ("ch02-masked-load-store", "the mean never stored",
     [("    tl.store(mean_ptr + row, tl.sum(scores, axis=0) / n_cols)\n", "")],
     "random 2x31", "never stored"),
    ("ch02-masked-load-store", "a second load for the mean",
     [("scores = tl.where(mask, x, 0.0)", "scores = tl.load(in_ptr + row * n_cols + cols, mask=mask, other=0.0)")],
     ch02.TRAFFIC_CASE, "loaded 30"),
    ("ch02-padding-self-test", "only the seed's [0, 0, 0, 0]",
     [("        [[0.0, 0.0, 0.0], [1 / 3, 1 / 3, 1 / 3]],",
       "        [[0.0, 0.0, 0.0, 0.0], [0.25, 0.25, 0.25, 0.25]],"),
      ("        [[-3002.0, -3001.0, -3000.0], [0.0900, 0.2447, 0.6652]],", "")],
     ch02.PADDINGS[1][0], "none of your rows leaves a padding lane"),
    ("ch02-padding-self-test", "no all-negative row",
     [("        [[-3002.0, -3001.0, -3000.0], [0.0900, 0.2447, 0.6652]],", "")],
     ch02.PADDINGS[3][0], "exp(-1000 - max) is (almost) 0"),
    ("ch02-padding-self-test", "expects what a 0-padding kernel gives",
     [("[1 / 3, 1 / 3, 1 / 3]", "[0.25, 0.25, 0.25]")],
     ch02.PADDINGS[0][0], "the correct kernel fails your case 1"),
    ("ch02-padding-self-test", "only [0, 0, 0], expecting what a 0-padding kernel gives: the wrong expectation named",
     [("[1 / 3, 1 / 3, 1 / 3]", "[0.25, 0.25, 0.25]"),
      ("        [[-3002.0, -3001.0, -3000.0], [0.0900, 0.2447, 0.6652]],", "")],
     ch02.PADDINGS[1][0], "your expected output for case 1 is what that kernel computes"),
    ("ch02-padding-self-test", "the chapter's own example row [-1002, -1001, -1000] as the negative row",
     [("[[-3002.0, -3001.0, -3000.0],", "[[-1002.0, -1001.0, -1000.0],")],
     ch02.PADDINGS[4][0], "exp(-2000 - max) is (almost) 0"),
]

# The pitfalls the chapter names (check_helpers.PITFALLS), and more caught by value (same format)
CAUGHT = chapter_rows(PITFALLS, "ch02")


@pytest.mark.parametrize("ex,mutant,edits,case,words", MISSED_BEFORE, ids=[f"{m[0]}: {m[1]}" for m in MISSED_BEFORE])
def test_mutant_passed_the_old_cases_and_is_killed_now(ex, mutant, edits, case, words, tmp_path):
    mutant_passed_the_old_cases_and_is_killed_now(ex, mutant, edits, case, words, tmp_path)


@pytest.mark.parametrize("ex,mutant,edits,case,words", NEW_EXERCISES, ids=[f"{m[0]}: {m[1]}" for m in NEW_EXERCISES])
def test_new_exercise_mutant_is_killed(ex, mutant, edits, case, words, tmp_path):
    new_exercise_mutant_is_killed(ex, mutant, edits, case, words, tmp_path)


@pytest.mark.parametrize("ex,pitfall,edits,case,words", CAUGHT, ids=[f"{p[0]}: {p[1]}" for p in CAUGHT])
def test_named_pitfall_is_caught(ex, pitfall, edits, case, words, tmp_path):
    """The pitfalls the chapter names that the checks caught before too (by value)."""
    named_pitfall_is_caught(ex, edits, case, words, tmp_path)
