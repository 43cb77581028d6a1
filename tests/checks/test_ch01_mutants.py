"""Mutants of chapter 1's solutions: wrong answers a learner could write, each failing its check with a message that
names the mistake.

``MISSED_BEFORE`` are wrong answers the check used to pass: for each, every case the old check had still
passes, and only a case that checks the property the chapter teaches kills it. ``CAUGHT`` holds the pitfalls
the chapter names (caught by value), so that every named pitfall has a mutant.
"""
import pytest

from check_helpers import PITFALLS, chapter_rows
from mutant_helpers import (mutate, mutant_passed_the_old_cases_and_is_killed_now, named_pitfall_is_caught,
                            new_exercise_mutant_is_killed)
from softmax_lab.checks import ch01

# Wrong answers the check used to pass, before it checked the property the chapter teaches:
# (exercise, mutant, (old, new) edits of the solution, the case that must fail, words its line must hold)
MISSED_BEFORE = [
    ("ch01-stable-row", "torch.softmax inside the launcher",
     [("    softmax_row_kernel[(1,)](out, x, x.numel(), BLOCK=BLOCK)", "    out.copy_(torch.softmax(x, dim=-1))")],
     ch01.TRAFFIC_CASE, "never launched softmax_row_kernel"),
    ("ch01-stable-row", "shift by the row mean (right for every row without a wide spread)",
     [("m = tl.max(x, axis=0)", "m = tl.sum(tl.where(mask, x, 0.0), axis=0) / n")],
     ch01.WIDE_ROW, "exp overflowed to inf"),
]

# Other shifts than the max, failing the old cases too: the message names what overflowed, not a missing max
OTHER_SHIFTS = [
    ("ch01-stable-row", "shift by half the max", [("p = tl.exp(x - m)", "p = tl.exp(x - m / 2)")],
     "large values [1000, 1001, 1002]", "called exp on a value past 88.7"),
]

# Its newer exercises: (exercise, mutant, edits, failing case, words)
NEW_EXERCISES = [
    ("ch01-shift-trace", "says nothing changes", [("return [True, False, False, False, False]",
                                                   "return [False, False, False, False, False]")],
     "which steps change between the two rows", "disagree with your verdict"),
    ("ch01-shift-trace", "says everything changes", [("return [True, False, False, False, False]",
                                                      "return [True, True, True, True, True]")],
     "which steps change between the two rows", "disagree with your verdict"),
    ("ch01-shift-trace", "predicts overflow for [1000, 1000, 1000]",
     [("return [1000.0, [0.0, 0.0, 0.0], [1.0, 1.0, 1.0], 3.0, [0.3333, 0.3333, 0.3333]]",
       "return [1000.0, [0.0, 0.0, 0.0], [1.0, 1.0, 1.0], 3.0, [0.0, 0.0, 0.0]]")],
     "your trace of [1000, 1000, 1000]", "differs from what float32 computes at the step(s): y"),
    ("ch01-shift-trace", "forgets the shift",
     [("return [1000.0, [0.0, 0.0, 0.0]", "return [1000.0, [1000.0, 1000.0, 1000.0]")],
     "your trace of [1000, 1000, 1000]", "step(s): x - max"),
    ("ch01-shift-trace", "the textbook's NaN predicted for the stable formula on [1000, -1000, 1000]",
     [("[1.0, 0.0, 1.0], 2.0, [0.5, 0.0, 0.5]]", '[1.0, 0.0, 1.0], 2.0, [0.5, float("nan"), 0.5]]')],
     "your trace of [1000, -1000, 1000]", "step(s): y"),
    ("ch01-shift-trace", "the tie's second max left out: one lane at 1",
     [("[1.0, 0.0, 1.0], 2.0, [0.5, 0.0, 0.5]]", "[1.0, 0.0, 0.0], 1.0, [1.0, 0.0, 0.0]]")],
     "your trace of [1000, -1000, 1000]", "exp(x - max), sum, y (the first of them"),
    ("ch01-shift-trace", "exp(-2000) predicted as a NaN (an underflow is a plain 0)",
     [("[1.0, 0.0, 1.0], 2.0, [0.5, 0.0, 0.5]]", '[1.0, float("nan"), 1.0], 2.0, [0.5, 0.0, 0.5]]')],
     "your trace of [1000, -1000, 1000]", "step(s): exp(x - max)"),
    ("ch01-count-nonfinite", "float64's counts (overflow only past 709.8)",
     [('"wide": [[1, 0], [3, 0], [3, 0]]', '"wide": [[0, 0], [3, 0], [3, 0]]')],
     "your counts for a wide row [0, 100, -100]", "float64's counts"),
    ("ch01-count-nonfinite", "every output of an inf sum counted as NaN",
     [('"wide": [[1, 0], [3, 0], [3, 0]]', '"wide": [[3, 0], [3, 0], [3, 0]]')],
     "your counts for a wide row [0, 100, -100]", "textbook on x (too many)"),
    ("ch01-count-nonfinite", "the stable formula predicted to break like the textbook one",
     [('"chapter": [[0, 0], [4, 0], [4, 0]]', '"chapter": [[0, 0], [4, 4], [4, 4]]')],
     "your counts for the chapter's row [2, 1, 0, -1.5]", "stable on x + 1000 (too many), stable on x - 1000"),
    ("ch01-count-nonfinite", "the shift by -1000 predicted to break [950, 1000] too",
     [('"near 1000": [[2, 0], [2, 0], [0, 0]]', '"near 1000": [[2, 0], [2, 0], [2, 0]]')],
     "your counts for a row near 1000 [950, 1000]", "textbook on x - 1000 (too many)"),
    ("ch01-count-nonfinite", "inf predicted to be harmless for the stable formula",
     [('"with inf": [[1, 2], [2, 2], [1, 2]]', '"with inf": [[1, 0], [2, 0], [1, 0]]')],
     "your counts for a row holding inf [inf, 0]", "stable on x (too few)"),
    ("ch01-count-nonfinite", "a count larger than the row",
     [('"chapter": [[0, 0], [4, 0], [4, 0]]', '"chapter": [[0, 0], [5, 0], [4, 0]]')],
     "your counts for the chapter's row [2, 1, 0, -1.5]", "more than the row has outputs"),
    ("ch01-count-nonfinite", "code, not numbers: a malformed answer",
     [('"with inf": [[1, 2], [2, 2], [1, 2]]', '"with inf": [1, 2]')],
     "your counts for a row holding inf [inf, 0]", "three pairs of whole numbers"),
    # Right values, computed by code the cell runs: only the numbers case fails (the values pass)
    ("ch01-shift-trace", "the trace computed with torch, not predicted",
     [('    if row == "zeros":\n        return [0.0,',
       '    x = torch.tensor({"zeros": [0.0] * 3, "thousands": [1000.0] * 3, "tie": [1000.0, -1000.0, 1000.0]}[row])\n'
       '    m, p = x.max(), torch.exp(x - x.max())\n'
       '    return [float(m), (x - m).tolist(), p.tolist(), float(p.sum()), (p / p.sum()).tolist()]\n'
       '    if row == "zeros":\n        return [0.0,')],
     ch01.NUMBERS_CASE, "predicted_trace runs `torch.tensor("),
    ("ch01-shift-trace", "the verdict read off a table the cell computed",
     [("STEPS = [", "CHANGES = [True, False, False, False, False]\nSTEPS = ["),
      ("return [True, False, False, False, False]", "return CHANGES")],
     ch01.NUMBERS_CASE, "steps_that_change reads CHANGES, a name from outside it"),
    ("ch01-count-nonfinite", "the counts computed with torch, not predicted",
     [('    return {\n        "chapter": [[0, 0], [4, 0], [4, 0]],',
       '    x, counts = torch.tensor(ROWS[row], dtype=torch.float32), []\n'
       '    for r in (x, x + 1000, x - 1000):\n'
       '        t, p = torch.exp(r) / torch.exp(r).sum(), torch.exp(r - r.max())\n'
       '        counts.append([int((~torch.isfinite(t)).sum()), int((~torch.isfinite(p / p.sum())).sum())])\n'
       '    return counts\n'
       '    return {\n        "chapter": [[0, 0], [4, 0], [4, 0]],')],
     ch01.NUMBERS_CASE, "must be numbers written inside the function"),
    # Ways around the numbers rule found by a learner-reviewer: a default argument, a decorator, a bound method
    ("ch01-count-nonfinite", "the counts read from a default argument",
     [("def predicted_counts(row):", "def predicted_counts(row, table=ROWS):")],
     ch01.NUMBERS_CASE, "predicted_counts reads ROWS, a name from outside it"),
    ("ch01-count-nonfinite", "the counts replaced by a decorator",
     [("def predicted_counts(row):", "@lambda f: f\ndef predicted_counts(row):")],
     ch01.NUMBERS_CASE, "predicted_counts runs `lambda f: f`"),
    ("ch01-count-nonfinite", "the counts a dict's method, computed beforehand",
     [("def predicted_counts(row):", "def _counts(row):"),
      ("    ### END SOLUTION",
       "    ### END SOLUTION\n\n\npredicted_counts = {k: _counts(k) for k in ROWS}.__getitem__")],
     ch01.NUMBERS_CASE, "predicted_counts is not a def (or a lambda) written in the exercise cell"),
]

# The pitfalls the chapter names (check_helpers.PITFALLS), and more caught by value (same format)
CAUGHT = chapter_rows(PITFALLS, "ch01")


@pytest.mark.parametrize("ex,mutant,edits,case,words", MISSED_BEFORE, ids=[f"{m[0]}: {m[1]}" for m in MISSED_BEFORE])
def test_mutant_passed_the_old_cases_and_is_killed_now(ex, mutant, edits, case, words, tmp_path):
    mutant_passed_the_old_cases_and_is_killed_now(ex, mutant, edits, case, words, tmp_path)


@pytest.mark.parametrize("ex,mutant,edits,case,words", NEW_EXERCISES, ids=[f"{m[0]}: {m[1]}" for m in NEW_EXERCISES])
def test_new_exercise_mutant_is_killed(ex, mutant, edits, case, words, tmp_path):
    new_exercise_mutant_is_killed(ex, mutant, edits, case, words, tmp_path)


@pytest.mark.parametrize("ex,mutant,edits,case,words", OTHER_SHIFTS, ids=[f"{m[0]}: {m[1]}" for m in OTHER_SHIFTS])
def test_other_shift_is_killed(ex, mutant, edits, case, words, tmp_path):
    new_exercise_mutant_is_killed(ex, mutant, edits, case, words, tmp_path)


@pytest.mark.parametrize("ex,pitfall,edits,case,words", CAUGHT, ids=[f"{p[0]}: {p[1]}" for p in CAUGHT])
def test_named_pitfall_is_caught(ex, pitfall, edits, case, words, tmp_path):
    """The pitfalls the chapter names that the checks caught before too (by value)."""
    named_pitfall_is_caught(ex, edits, case, words, tmp_path)


@pytest.mark.parametrize("ex,mutant,edits,case,words", NEW_EXERCISES[-3:], ids=[m[1] for m in NEW_EXERCISES[-3:]])
def test_the_judge_reads_the_cell_as_the_check_does(ex, mutant, edits, case, words):
    """The grader's judge applies ``code_in_source`` to the whole exercise cell: the same ways around it fail."""
    assert words in ch01.code_in_source(mutate(ex, edits), "predicted_counts")
    assert ch01.code_in_source(mutate(ex, []), "predicted_counts") == ""
