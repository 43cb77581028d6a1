"""Chapter 1's exercise checks (the stable row softmax, the shift trace, counting non-finite values): each exercise cell
of the solution notebook fails its check when blank ("not implemented"), passes as solved, and fails with a message
naming the pitfall when a mistake the chapter names is put in."""
import pytest

from check_helpers import (PITFALLS, blank_exercise_fails_with_not_implemented, chapter_exercises, chapter_rows,
                           one_case_table, pitfall_fails_naming_it, solution_passes)

CH01_PITFALLS = chapter_rows(PITFALLS, "ch01")


@pytest.mark.parametrize("ex", chapter_exercises("ch01"))
def test_blank_exercise_fails_with_not_implemented(ex, tmp_path):
    blank_exercise_fails_with_not_implemented(ex, tmp_path)


@pytest.mark.parametrize("ex", chapter_exercises("ch01"))
def test_solution_passes(ex, tmp_path):
    solution_passes(ex, tmp_path)


@pytest.mark.parametrize("ex,pitfall,edits,case,words", CH01_PITFALLS,
                         ids=[f"{p[0]}: {p[1]}" for p in CH01_PITFALLS])
def test_pitfall_fails_naming_it(ex, pitfall, edits, case, words, tmp_path):
    pitfall_fails_naming_it(ex, edits, case, words, tmp_path)


def _tables():
    from softmax_lab.checks import ch01

    return [("ch01-stable-row", [row[0] for row in ch01.ROW_TABLE], [ch01.TRAFFIC_CASE], ch01.JUDGE_FRESH),
            ("ch01-shift-trace", [row[0] for row in ch01.SHIFT_TABLE], [ch01.NUMBERS_CASE], 0),
            ("ch01-count-nonfinite", [row[0] for row in ch01.COUNT_TABLE], [ch01.NUMBERS_CASE], 0)]


@pytest.mark.parametrize("ex,names,check_only,fresh", _tables(), ids=[t[0] for t in _tables()])
def test_check_and_judge_read_one_case_table(ex, names, check_only, fresh, tmp_path):
    one_case_table(ex, names, tmp_path, check_only, fresh)
