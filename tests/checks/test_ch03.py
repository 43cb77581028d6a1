"""Chapter 3's exercise check (predict the naive kernel's loads): the exercise cell of the solution notebook
fails its check when blank ("not implemented"), passes as solved, and fails with a message naming the pitfall when a
mistake the chapter names is put in."""
import pytest

from check_helpers import (PITFALLS, blank_exercise_fails_with_not_implemented, chapter_exercises, chapter_rows,
                           one_case_table, pitfall_fails_naming_it, solution_passes)

CH03_PITFALLS = chapter_rows(PITFALLS, "ch03")


@pytest.mark.parametrize("ex", chapter_exercises("ch03"))
def test_blank_exercise_fails_with_not_implemented(ex, tmp_path):
    blank_exercise_fails_with_not_implemented(ex, tmp_path)


@pytest.mark.parametrize("ex", chapter_exercises("ch03"))
def test_solution_passes(ex, tmp_path):
    solution_passes(ex, tmp_path)


@pytest.mark.parametrize("ex,pitfall,edits,case,words", CH03_PITFALLS,
                         ids=[f"{p[0]}: {p[1]}" for p in CH03_PITFALLS])
def test_pitfall_fails_naming_it(ex, pitfall, edits, case, words, tmp_path):
    pitfall_fails_naming_it(ex, edits, case, words, tmp_path)


def test_check_and_judge_read_one_case_table(tmp_path):
    from softmax_lab.checks import ch03

    one_case_table("ch03-naive-normalize", [row[0] for row in ch03.NAIVE_TABLE], tmp_path, [], ch03.JUDGE_FRESH)


@pytest.mark.parametrize("rows,cols,block", [(2, 5, 2), (1, 9, 4), (3, 4, 4)])
def test_the_exact_count_is_what_memcount_counts(rows, cols, block):
    """The count the check and the judge use where memcount cannot run is memcount's count of the naive kernel."""
    from softmax_lab.checks import ch03

    assert ch03.counted_loads(rows, cols, block) == ch03.naive_load_count(rows, cols)
