"""Mutants of chapter 0's solution (ch00-double): wrong answers a learner could write, each failing its check with a
message that names the mistake.

``MISSED_BEFORE`` are wrong answers the check used to pass: for each, every case the old check had still
passes, and only a case that checks the property the chapter teaches kills it. ``CAUGHT`` holds the pitfalls
the chapter names (caught by value), so that every named pitfall has a mutant.
"""
import pytest

from check_helpers import PITFALLS, chapter_rows
from mutant_helpers import mutant_passed_the_old_cases_and_is_killed_now, named_pitfall_is_caught
from softmax_lab.checks import ch00

# Wrong answers the check used to pass, before it checked the property the chapter teaches:
# (exercise, mutant, (old, new) edits of the solution, the case that must fail, words its line must hold)
MISSED_BEFORE = [
    ("ch00-double", "the launcher computes 2 * x with torch",
     [("    double_kernel[grid](out, x, x.numel(), BLOCK=BLOCK)", "    out.copy_(2 * x)")],
     ch00.TRAFFIC_CASE, "never launched double_kernel"),
    ("ch00-double", "loads its block twice",
     [("tl.store(out_ptr + offs, 2 * x, mask=mask)",
       "tl.store(out_ptr + offs, x + tl.load(in_ptr + offs, mask=mask), mask=mask)")],
     ch00.TRAFFIC_CASE, "load each element of x once"),
]

# The pitfalls the chapter names (check_helpers.PITFALLS), and more caught by value (same format)
CAUGHT = chapter_rows(PITFALLS, "ch00") + [
    ("ch00-double", "the grid does not cover the vector", [("triton.cdiv(x.numel(), BLOCK)", "x.numel() // BLOCK")],
     "vector of 100", "the grid does not cover the whole vector"),
]


@pytest.mark.parametrize("ex,mutant,edits,case,words", MISSED_BEFORE, ids=[f"{m[0]}: {m[1]}" for m in MISSED_BEFORE])
def test_mutant_passed_the_old_cases_and_is_killed_now(ex, mutant, edits, case, words, tmp_path):
    mutant_passed_the_old_cases_and_is_killed_now(ex, mutant, edits, case, words, tmp_path)


@pytest.mark.parametrize("ex,pitfall,edits,case,words", CAUGHT, ids=[f"{p[0]}: {p[1]}" for p in CAUGHT])
def test_named_pitfall_is_caught(ex, pitfall, edits, case, words, tmp_path):
    """The pitfalls the chapter names that the checks caught before too (by value)."""
    named_pitfall_is_caught(ex, edits, case, words, tmp_path)
